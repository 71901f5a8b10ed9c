"""Gains and failure signatures: pure functions the fold and the exit rules share.

Speed and "gain" (documented once, used by the fold and by the engine alike):
- With speed measured (a GPU), which pass is better is standing_rank's rule (slower than
  the fastest baseline at no shape first, then vs best, then the floor fraction). An
  attempt is a *gain* when it passes and beats the branch's reference (its best so far,
  or the attempt it was opened from) beyond the measured noise: from slower somewhere to
  slower nowhere, or vs best > ref * (1 + max(noise, 0.01)), noise being the larger of
  the two attempts' (standing_rank.is_gain). Logs without standings use the speedup over
  the reference the same way (is_gain below). Any better pass becomes the branch's best;
  only a gain resets stagnation. Once a person approved a move on the branch, its line
  begins there (branch_line.py): the reference is that line's best, its first pass a gain.
- Without speed (the CPU interpreter) nothing can be faster. "Best" is the first
  passing attempt (of the branch, of the run), and a line gains once, by its first
  passing kernel (the branch's first, or the first after an approved move); stagnation
  counts the attempts after it, so a spent line ends its branch as on a GPU. The target
  rule never fires on the CPU.
"""

from __future__ import annotations

import re

MIN_NOISE = 0.01  # gains below 1% are never trusted, however quiet the timings

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.-]+")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def normalize_error(text: str) -> str:
    """An error line with addresses, paths and numbers blanked, so the same fault at
    another index or with another value has the same signature."""
    text = _ADDRESS.sub("<addr>", text or "")
    text = _PATH.sub("<path>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip().lower()


def failure_signature(gate: str | None, summary: str) -> str:
    return f"{gate or '?'}: {normalize_error(summary)}"


def is_gain(
    reference: float | None,
    speedup: float | None,
    noise: float | None = None,
    reference_noise: float | None = None,
) -> bool:
    """A measured pass beats the reference beyond noise (see the module doc)."""
    if speedup is None:
        return False
    if reference is None:
        return True
    margin = max(noise or 0.0, reference_noise or 0.0, MIN_NOISE)
    return speedup > reference * (1.0 + margin)
