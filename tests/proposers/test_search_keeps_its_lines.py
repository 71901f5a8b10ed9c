"""Every op's search keeps its branches' lines, read from the run's own log: no branch
changes to a family it left, or to one another live branch holds or waits at a gate to
take; after an approved move a branch builds on it; the gates a run asks are few
(at most one per family a branch can still go to); a spent line ends its branch by
stagnation, with the reason.

The real engine and `search` proposer, with verifier doubles (helpers.py): on the "CPU"
every candidate passes and nothing is timed (what Triton's interpreter says of these
templates, a hundred times faster), on the "GPU" every candidate passes at 1.0x (no gain
ever, the case where a branch is offered families). A person's gate policy approves or
vetoes every change.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import ConstantSpeedRunner, ScriptedRunner

from kernelladder.engine import create_run
from kernelladder.engine.proposers.search import SearchProposer
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.run.options import RunOptions
from kernelladder.ops.registry import catalog

OPS = sorted(catalog())
MAX_ATTEMPTS = 90


def line_violations(events: list[ev.Event]) -> tuple[list[str], dict[str, Any]]:
    """What in the log breaks a rule of the branches' lines (an empty list when none),
    and counts: gates and family changes per branch. A model of the rules kept apart from
    the engine's own (engine/run/branch_line.py)."""
    line: dict[str, str] = {}  # each branch's family, once it has one
    left: dict[str, set[str]] = {}
    live: set[str] = set()
    parent_of: dict[int, int | None] = {}
    family_of: dict[int, str | None] = {}
    branch_of: dict[int, str] = {}
    claims: dict[str, tuple[str, str]] = {}  # pending gate -> (branch, family it would take)
    built_on: dict[str, int] = {}  # branch -> the attempt its last approved gate let through
    gate_attempt: dict[str, int] = {}
    changes: dict[str, int] = {}
    broken: list[str] = []

    def descends(n: int | None, ancestor: int) -> bool:
        while n is not None:
            if n == ancestor:
                return True
            n = parent_of.get(n)
        return False

    def admit(n: int) -> None:
        bid, family = branch_of[n], family_of[n]
        if family and line.get(bid) and family != line[bid]:
            left.setdefault(bid, set()).add(line[bid])
            changes[bid] = changes.get(bid, 0) + 1
        if family:
            line[bid] = family

    for e in events:
        if isinstance(e, ev.BranchOpened):
            live.add(e.branch_id)
        elif isinstance(e, ev.BranchExhausted | ev.BranchPruned):
            live.discard(e.branch_id)
        elif isinstance(e, ev.ProposalReceived):
            n, bid, family = e.attempt, e.branch_id, e.family
            parent_of[n], family_of[n], branch_of[n] = e.parent_attempt, family, bid
            change = bool(family and line.get(bid) and family != line[bid])
            if change:
                held = {line[o] for o in live if o != bid and o in line}
                held |= {f for gid, (o, f) in claims.items() if o != bid and o in live}
                if family in left.get(bid, set()):
                    broken.append(f"#{n}: {bid} goes back to {family}, which it left")
                if family in held:
                    broken.append(f"#{n}: {bid} changes to {family}, another live branch's")
                if e.undo_cost != ev.UNDO_HIGH:
                    broken.append(f"#{n}: a change of {bid}'s line rated {e.undo_cost}")
            elif bid in built_on and not descends(e.parent_attempt, built_on[bid]):
                broken.append(f"#{n}: {bid} is not built on #{built_on[bid]}, approved")
            if e.undo_cost != ev.UNDO_HIGH:
                admit(n)
        elif isinstance(e, ev.GateRaised):
            gate_attempt[e.gate_id] = e.attempt
            family = family_of.get(e.attempt)
            if family and family != line.get(e.branch_id):
                claims[e.gate_id] = (e.branch_id, family)
        elif isinstance(e, ev.GateResolved):
            claims.pop(e.gate_id, None)
            n = gate_attempt[e.gate_id]
            if e.decision == "approve":
                admit(n)
                built_on[branch_of[n]] = n
    counts = {"gates": len(gate_attempt), "changes": changes}
    return broken, counts


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("op", OPS)
async def test_no_branch_returns_to_a_family_or_takes_another_branchs(tmp_path, op, device):
    results = {}
    for gate in ("approve", "veto"):
        opts = RunOptions(
            op=op, device=device, run_dir=str(tmp_path / gate), branches=3, gate=gate,
            stagnation=8, max_attempts=MAX_ATTEMPTS,
        )  # fmt: skip
        runner = ScriptedRunner(device="cpu") if device == "cpu" else ConstantSpeedRunner()
        run = create_run(opts, runner=runner, proposer=SearchProposer())
        state = await asyncio.wait_for(run.run(), 120)
        events = read_events(run.run_dir)
        broken, counts = line_violations(events)
        assert broken == [], (gate, broken)
        families = len(catalog()[op])
        assert all(c <= families - 1 for c in counts["changes"].values()), counts
        if gate == "veto":  # each branch offered a family once, vetoed: it ends in its line
            assert counts["gates"] <= 3 and not counts["changes"], counts
        # a run ends when its branches' lines are spent (or its attempts are used up)
        if state.finish_reason != ev.RULE_MAX_ATTEMPTS:
            assert state.finish_reason == ev.RULE_ALL_BRANCHES_DONE
        for b in state.branches.values():
            if b.rule == ev.RULE_STAGNATION:
                assert f"in its {b.line_family} line" in b.detail, b.detail
        results[gate] = (counts["gates"], state.finish_reason)
    # with every change approved, three branches of four families are asked 9 times at most
    # (a branch goes to each family once); and all of them end before 90 attempts
    if len(catalog()[op]) <= 4:
        assert results["approve"][0] <= 9 and results["approve"][1] == ev.RULE_ALL_BRANCHES_DONE
