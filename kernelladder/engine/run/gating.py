"""Undo cost of a proposed move, defined once for every proposer that writes moves
(search, tune, api, code, openai): from the move against its true parent, plus whether
the branch changes its line. A replay keeps the final rating its saved run recorded
(that run's rating by this rule), so it asks the gates the saved run asked.

- Against the parent (the attempt the source was derived from, proposal_base): the
  proposer's own class (low / medium / high, with its reason), escalated to high when
  the source touches the fence (side streams, threads, ctypes, the environment,
  sys.modules, monkeypatching) or changes the algorithm family of that parent.
- The line (branch_line.py): high when the move's family is not the family of its
  branch's line (a family change, whichever attempt it was made from), or when it starts
  again from the op's starting candidate while the line holds a verified kernel.

Anything else is not hard to undo: a step from another branch's attempt of the same
family, or a tuner's move of launch parameters, keeps the proposer's class whichever
branch holds the run's best. The reason names the rule: "b1's line changes: ..." and/or
"against #12: ...".
Pure functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernelladder.engine.protocols import Proposal
from kernelladder.engine.record.events import UNDO_HIGH, UNDO_LOW, UNDO_MEDIUM
from kernelladder.engine.run.branch_line import closed_families, line_change

if TYPE_CHECKING:
    from kernelladder.engine.record.state_model import RunState

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


@dataclass(frozen=True)
class LineChange:
    """A move that changes its branch's line from `left` to `to`: `why`, the proposer's
    word for it; `entered_from`, the branch whose attempt of the new family it was made
    from; `closed`, the families closed to the branch, with why."""

    left: str
    to: str
    why: str = ""
    entered_from: str | None = None
    closed: Mapping[str, str] = field(default_factory=dict)


def assess_undo(
    proposal: Proposal,
    *,
    family: str | None,
    parent: int | None,
    parent_family: str | None,
    branch_id: str,
    line: LineChange | None = None,
    restarts: bool = False,
) -> tuple[str, str]:
    """The move's final (undo_cost, reason) from the proposer's. `restarts`: it starts
    again from the op's starting candidate while its line holds a verified kernel."""
    cost = proposal.undo_cost if proposal.undo_cost in UNDO_CLASSES else UNDO_MEDIUM
    reasons: list[str] = []
    if line is not None:
        text = f"{branch_id}'s line changes: {line.left} -> {line.to}"
        if line.why:
            text += f" ({line.why})"
        if line.entered_from is not None and parent is not None:
            text += f", entered at #{parent} of {line.entered_from}"
        if line.to in line.closed:
            text += f"; {line.to} is closed to it ({line.closed[line.to]})"
        reasons.append(text)
    elif restarts:
        reasons.append(f"{branch_id} leaves its line: starts again from the starting candidate")
    against: list[str] = fence_concerns(proposal.source)
    if against:
        against = ["touches the fence: " + ", ".join(against)]
    if (
        family
        and parent_family
        and family != parent_family
        and (line is None or line.left != parent_family)
    ):  # the line's change already says it when the parent is of the line's family
        against.append(f"changes algorithm family {parent_family} -> {family}")
    if cost == UNDO_HIGH:
        against.append(f"rated high by the proposer: {proposal.undo_reason or 'no reason given'}")
    if against:
        where = f"#{parent}" if parent is not None else "the starting candidate"
        reasons.append(f"against {where}: " + ", ".join(against))
    if reasons:
        return UNDO_HIGH, "; ".join(reasons)
    return cost, proposal.undo_reason


def undo_of(
    state: RunState, branch_id: str, parent: int | None, proposal: Proposal
) -> tuple[str, str]:
    """The move's (undo cost, reason) on its branch, read from the folded state."""
    meta = dict(proposal.meta or {})
    family = meta.get("family")
    family = str(family) if family else None
    b = state.branches[branch_id]
    parent_attempt = state.attempts.get(parent) if parent is not None else None
    parent_family = parent_attempt.family if parent_attempt is not None else None
    line = None
    change = line_change(state, branch_id, family)
    if change is not None:
        entered_from = None
        if parent_attempt is not None and parent_attempt.branch_id != branch_id:
            entered_from = parent_attempt.branch_id if parent_family == family else None
        why = meta.get("line_why")
        closed = closed_families(state, branch_id)
        line = LineChange(*change, str(why) if why else "", entered_from, closed)
    verified = b.best_attempt is not None or b.line_best is not None
    return assess_undo(
        proposal,
        family=family,
        parent=parent,
        parent_family=parent_family,
        branch_id=branch_id,
        line=line,
        restarts=bool(meta.get("restart")) or (parent is None and verified),
    )


def recorded_undo(proposal: Proposal) -> tuple[str, str]:
    """A replayed proposal's rating: the final one its saved run recorded (already rated
    by this rule there), so a replay asks the gates the saved run asked."""
    cost = proposal.undo_cost if proposal.undo_cost in UNDO_CLASSES else UNDO_MEDIUM
    return cost, proposal.undo_reason
