"""A run directory's files beside the log: attempts/<n>.py and attempts/<n>.json.

Read lazily and cached (a source or a verdict never changes once written), so only the
selected attempt's files are ever read. Nothing here imports textual or torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelladder.ops.registry import start_path
from kernelladder.verifier.contract.verdict import Verdict


class RunFiles:
    def __init__(self, run_dir: str | Path | None) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self._sources: dict[int, str] = {}
        self._verdicts: dict[int, Verdict] = {}

    def source(self, attempt: int) -> str | None:
        if attempt in self._sources:
            return self._sources[attempt]
        path = self._path(attempt, ".py")
        if path is None or not path.is_file():
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
        self._sources[attempt] = text
        return text

    def verdict(self, attempt: int) -> Verdict | None:
        if attempt in self._verdicts:
            return self._verdicts[attempt]
        path = self._path(attempt, ".json")
        if path is None or not path.is_file():
            return None
        try:
            verdict = Verdict.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            return None  # half-written or foreign: shown as "not available yet"
        self._verdicts[attempt] = verdict
        return verdict

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
