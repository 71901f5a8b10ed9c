"""The workers' Triton cache manager: a cache that can move.

Triton records each compiled kernel's files in a group file by absolute path. A cache
copied or moved elsewhere (a warm cache carried to a new box or image, $XDG_CACHE_HOME
pointed at a copy) still names its old place; where that place still exists, Triton
reads the kernel from there. Under the sandbox that read is a wall the worker may not
pass (no reading homes or /tmp outside the caches), and it came during the verifier's
own compile of the candidate: every candidate failed at anti-cheat for the cache's
history, not for anything it did. This manager reads a group's files in its own
directory (a file of the same name there) and nowhere else; a file missing there is a
miss, and Triton compiles again.

Workers get it through TRITON_CACHE_MANAGER (env.TRITON_CACHE_MANAGER, set by
env.worker_env) unless the caller named a manager of their own.
"""

from __future__ import annotations

import json
import os

from triton.runtime.cache import FileCacheManager


class RelocatableCacheManager(FileCacheManager):
    """Triton's file cache, its groups' files read from this cache's directory only."""

    def get_group(self, filename: str) -> dict[str, str] | None:
        grp_filename = f"__grp__{filename}"
        if not self.has_file(grp_filename):
            return None
        try:
            with open(self._make_path(grp_filename)) as f:
                children = json.load(f).get("child_paths")
        except (OSError, ValueError, AttributeError):
            return None  # unreadable or not a group: a miss, compiled again
        if not isinstance(children, dict):
            return None
        found: dict[str, str] = {}
        for name, recorded in children.items():
            if not isinstance(recorded, str):
                return None
            here = self._make_path(os.path.basename(recorded))
            if not os.path.isfile(here):
                return None
            found[name] = here
        return found
