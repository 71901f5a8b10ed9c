"""A branch's line: the family it works in and the attempt it builds on, read from the
folded state (the fold keeps BranchState.line_family, line_start, line_best and
families_left). One set of rules for every proposer:

- a move whose family is not the line's changes the line (a high undo cost: gating.py);
- a branch does not change its line to a family another live branch's line holds (or
  waits at a gate to take), nor back to a family it left, nor to one vetoed on it; a
  proposal that another branch's change overtook while it was written is asked again;
- a move a person approved begins a line there: the branch builds on it (BranchState.head);
- a line that goes the stagnation limit without a gain ends the branch (rules.py), and
  the exit's detail says which families were closed to it.

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelladder.engine.record.state_model import BranchState, RunState


def closed_families(state: RunState, branch_id: str) -> dict[str, str]:
    """The families this branch's line may not change to, each with why ("vetoed here",
    "left at #28", "b2's line", "b3 waits at a gate to change to it"). The branch's own
    family is never among them."""
    b = state.branches[branch_id]
    out: dict[str, str] = {}
    for family in b.vetoed_families:
        out.setdefault(family, "vetoed here")
    for family, n in b.families_left.items():
        out.setdefault(family, f"left at #{n}")
    for other in state.branches.values():
        if other.id == branch_id or other.closed:
            continue
        if other.line_family:
            out.setdefault(other.line_family, f"{other.id}'s line")
        claimed = pending_line_change(state, other)
        if claimed:
            out.setdefault(claimed, f"{other.id} waits at a gate to change to it")
    if b.line_family:
        out.pop(b.line_family, None)
    return out


def pending_line_change(state: RunState, b: BranchState) -> str | None:
    """The family a branch waits at a gate to change its line to, if it does."""
    gate = state.gates.get(b.pending_gate) if b.pending_gate is not None else None
    a = state.attempts.get(gate.attempt) if gate is not None else None
    if a is None or not a.family or a.family == b.line_family:
        return None
    return a.family


def line_change(state: RunState, branch_id: str, family: str | None) -> tuple[str, str] | None:
    """(from, to) when a move of `family` changes the branch's line; None when it keeps
    it (the same family, no family, or a branch with no line yet)."""
    b = state.branches[branch_id]
    if not family or b.line_family is None or family == b.line_family:
        return None
    return b.line_family, family


def taken_meanwhile(
    state: RunState, branch_id: str, family: str | None, asked: Mapping[str, str]
) -> str | None:
    """Why a proposal's change of line into `family` is stale: the family was open when
    the proposer was asked (`asked`: the context's closed families) and another branch
    has taken it since (its line, or a gate it waits at). None when it is not."""
    if line_change(state, branch_id, family) is None or family in asked:
        return None
    closed = closed_families(state, branch_id)
    if family not in closed:
        return None
    return (
        f"{branch_id}'s proposal changes its line to {family}, closed to it since it was "
        f"asked ({closed[family]})"
    )


def closed_text(closed: dict[str, str]) -> str:
    """ "one-row-per-program (b2's line), two-pass (left at #30)" """
    return ", ".join(f"{family} ({why})" for family, why in sorted(closed.items()))


def spent_detail(state: RunState, branch_id: str) -> str:
    """What a person reads after "N attempts without a gain" when the branch ends: the
    line that was spent and the families that were closed to it."""
    b = state.branches[branch_id]
    parts = []
    if b.line_family:
        where = f" since #{b.line_start}" if b.line_start is not None else ""
        parts.append(f"in its {b.line_family} line{where}")
    closed = closed_families(state, branch_id)
    if closed:
        parts.append(f"closed to it: {closed_text(closed)}")
    return "; ".join(parts)
