"""A run directory's files beside the log: attempts/<n>.py and attempts/<n>.json.

Read lazily and cached (a source or a verdict never changes once written), so only the
selected attempt's files are ever read. Nothing here imports textual or torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kernelladder.ops.registry import start_path
from kernelladder.verifier.contract.verdict import Verdict

T = TypeVar("T")


class RunFiles:
    def __init__(self, run_dir: str | Path | None) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self._sources: dict[int, str] = {}
        self._verdicts: dict[int, Verdict] = {}

    def source(self, attempt: int) -> str | None:
        return self._cached(self._sources, attempt, ".py", str, errors="replace")

    def verdict(self, attempt: int) -> Verdict | None:
        def parse(text: str) -> Verdict:
            return Verdict.from_dict(json.loads(text))

        return self._cached(self._verdicts, attempt, ".json", parse)

    def _cached(
        self,
        cache: dict[int, T],
        attempt: int,
        suffix: str,
        parse: Callable[[str], T],
        errors: str = "strict",
    ) -> T | None:
        """The attempt's file, parsed and kept; None while it is missing or unreadable
        (half-written or foreign: shown as "not available yet")."""
        if attempt in cache:
            return cache[attempt]
        path = self._path(attempt, suffix)
        if path is None or not path.is_file():
            return None
        try:
            value = parse(path.read_text(encoding="utf-8", errors=errors))
        except (ValueError, KeyError, TypeError):
            return None
        cache[attempt] = value
        return value

    def _path(self, attempt: int, suffix: str) -> Path | None:
        if self.run_dir is None:
            return None
        return self.run_dir / "attempts" / f"{attempt}{suffix}"


def starting_candidate(op: str) -> str | None:
    """The built-in op's starting candidate, read as a file (the op's spec needs torch)."""
    path = start_path(op)
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8", errors="replace")
