"""Undo cost of a proposed move: the proposer's own class, escalated by the engine.

The engine raises a move to "high" (it then waits at a gate) when it
- touches the fence: the source reaches for things a kernel never needs and a cheat
  does (side streams, threads, ctypes, the environment, sys.modules, monkeypatching);
- changes the algorithm family against its parent (Proposal.meta["family"]);
- abandons the best lineage: the proposal asks to restart from the starting candidate
  (meta["restart"]) or is made from an attempt off its branch's lineage while that branch
  holds the run's best.
Every test reads the proposal's true parent: the attempt its source was derived from
(proposal_base), not the branch's best.
Pure functions; no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from kernelladder.engine.events import UNDO_HIGH, UNDO_LOW, UNDO_MEDIUM
from kernelladder.engine.protocols import Proposal

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


def proposal_base(proposal: Proposal, shown: int | None) -> tuple[int | None, str]:
    """(the attempt the proposal's source was derived from, where that was read): its
    base_attempt, else (SHOWN_PARENT, or not an attempt number) the parent it was shown."""
    base = proposal.base_attempt
    if base is None or (isinstance(base, int) and not isinstance(base, bool)):
        return base, "base_attempt"
    return shown, "shown"


def assess_undo(
    *,
    undo_cost: str,
    undo_reason: str,
    source: str,
    meta: dict[str, Any],
    parent_family: str | None,
    branch_holds_best: bool,
    branch_lineage: set[int],
    parent: int | None = None,
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
        if meta.get("restart"):
            reasons.append("abandons the best lineage (restarts from the starting candidate)")
        elif parent is not None and parent not in branch_lineage:
            reasons.append(f"abandons the best lineage (starts from attempt {parent})")
    if reasons and cost == UNDO_HIGH and undo_reason:
        # the proposer called its move high itself, and says why (a family change, and
        # why: stagnation; the point it goes on from): its words first, then the engine's
        reasons = [undo_reason] + [r for r in reasons if r != family_reason]
    if reasons:
        return UNDO_HIGH, "; ".join(reasons)
    return cost, undo_reason
