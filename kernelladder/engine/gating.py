"""Undo cost of a proposed move: the proposer's own class, escalated by the engine.

The engine raises a move to "high" (it then waits at a gate) when it
- touches the fence: the source reaches for things a kernel never needs and a cheat
  does (side streams, threads, ctypes, the environment, sys.modules, monkeypatching);
- changes the algorithm family against its parent (Proposal.meta["family"]);
- abandons the best lineage: the proposal asks to restart from the starting candidate
  (meta["restart"]) or from an attempt off its branch's lineage (meta["parent_attempt"])
  while that branch holds the run's best.
Pure functions; no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from kernelladder.engine.events import UNDO_HIGH, UNDO_LOW, UNDO_MEDIUM

UNDO_CLASSES = (UNDO_LOW, UNDO_MEDIUM, UNDO_HIGH)

# (pattern, what a person is told); matched on the source with comments stripped
FENCE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.MULTILINE), why)
    for p, why in (
        (r"\bcuda\s*\.\s*Stream\b|\bcuda\s*\.\s*stream\s*\(", "uses a CUDA side stream"),
        (r"\bimport\s+threading\b|\bfrom\s+threading\b|\bthreading\s*\.", "uses threads"),
        (r"\bconcurrent\s*\.\s*futures\b|\bmultiprocessing\b", "uses threads or processes"),
        (r"\bimport\s+ctypes\b|\bfrom\s+ctypes\b|\bctypes\s*\.", "uses ctypes"),
        (r"\bos\s*\.\s*environ\b|\bos\s*\.\s*(?:putenv|getenv)\b", "reads or sets the environment"),
        (r"\bsys\s*\.\s*modules\b", "touches sys.modules"),
        (r"\bsubprocess\b|\bos\s*\.\s*(?:system|popen|fork|exec\w*)\b", "starts processes"),
        (r"\bbuiltins\b|\b__builtins__\b", "touches builtins"),
        (r"\bimportlib\b|\b__import__\s*\(", "imports dynamically"),
        (r"\bsetattr\s*\(\s*(?:torch|triton|time|sys|os|builtins)\b", "monkeypatches a module"),
        (
            r"^\s*(?:torch|triton|time|sys|os|gc|math)(?:\s*\.\s*\w+)+\s*=[^=]",
            "monkeypatches a module",
        ),
        (r"\bgc\s*\.\s*(?:disable|freeze)\b", "changes the garbage collector"),
        (r"\bsignal\s*\.\s*\w+\s*\(", "installs signal handlers"),
        (r"\bsys\s*\.\s*settrace\b|\bsys\s*\.\s*setprofile\b", "installs a tracer"),
    )
)

_COMMENT = re.compile(r"#[^\n]*")


def fence_concerns(source: str) -> list[str]:
    """What in the source touches the fence (empty when nothing does)."""
    code = _COMMENT.sub("", source)
    found: list[str] = []
    for pattern, why in FENCE_PATTERNS:
        if pattern.search(code) and why not in found:
            found.append(why)
    return found


def assess_undo(
    *,
    undo_cost: str,
    undo_reason: str,
    source: str,
    meta: dict[str, Any],
    parent_family: str | None,
    branch_holds_best: bool,
    branch_lineage: set[int],
) -> tuple[str, str]:
    """The move's final (undo_cost, reason): the proposer's class unless the engine
    escalates it to high; the reason says which rule escalated it."""
    cost = undo_cost if undo_cost in UNDO_CLASSES else UNDO_MEDIUM
    reasons: list[str] = []
    concerns = fence_concerns(source)
    if concerns:
        reasons.append("touches the fence: " + ", ".join(concerns))
    family = meta.get("family")
    family_reason = ""
    if family and parent_family and family != parent_family:
        family_reason = f"changes algorithm family {parent_family} -> {family}"
        reasons.append(family_reason)
    if branch_holds_best:
        declared = meta.get("parent_attempt")
        if meta.get("restart"):
            reasons.append("abandons the best lineage (restarts from the starting candidate)")
        elif isinstance(declared, int) and declared not in branch_lineage:
            reasons.append(f"abandons the best lineage (starts from attempt {declared})")
    if reasons and cost == UNDO_HIGH and family_reason and undo_reason:
        # the proposer called its own family change high, and says why (e.g. stagnation)
        reasons = [undo_reason] + [r for r in reasons if r != family_reason]
    if reasons:
        return UNDO_HIGH, "; ".join(reasons)
    return cost, undo_reason
