"""The verifier's and the ops' files on disk, hashed: a second line behind the sandbox.

The worker hashes them when it starts and after every candidate; a difference means
the candidate (or something it started) changed the verifier that every later worker
would load, so the verdict fails at anti-cheat and the worker is replaced. Standard
library only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

# .../kernelladder
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WATCHED_DIRS = ("verifier", "ops")
MISSING = "missing"


def package_dir() -> str:
    return _PACKAGE


def watched_files(root: str | None = None) -> list[str]:
    """Every .py file of the verifier and the ops (starting candidates included), and
    the package's __init__."""
    root = root or _PACKAGE
    files = [os.path.join(root, "__init__.py")]
    for sub in WATCHED_DIRS:
        for folder, dirs, names in os.walk(os.path.join(root, sub)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return MISSING


def snapshot(root: str | None = None) -> dict[str, str]:
    """{path relative to the package's parent: sha256} of the watched files."""
    root = root or _PACKAGE
    base = os.path.dirname(root)
    return {os.path.relpath(p, base): _digest(p) for p in watched_files(root)}


def changed(before: Mapping[str, str], root: str | None = None) -> list[str]:
    """Watched files that differ from `before`: changed, removed or added."""
    now = snapshot(root)
    out = [p for p in before if now.get(p, MISSING) != before[p]]
    out += [p for p in now if p not in before]
    return sorted(out)


def combined(snap: Mapping[str, str]) -> str:
    """One hash of a whole snapshot (for the hello line and doctor)."""
    h = hashlib.sha256()
    for path in sorted(snap):
        h.update(f"{path}\0{snap[path]}\n".encode())
    return h.hexdigest()
