"""A branch keeps a line: a move a person approved is the base it builds on; it does not
change to a family another live branch holds or waits at a gate to take; when its line is
spent it ends by stagnation, and the exit says which families were closed to it.

Scripted doubles (helpers.py) where a proposal or a verdict must come on cue; the real
`search` proposer where its family changes are the point, with ScriptedRunner("cpu")
standing in for the CPU interpreter (every candidate passes, no speed: what the
interpreter says of the search's templates, in a fraction of its time).
"""

from __future__ import annotations

import asyncio

from helpers import ScriptedRunner, make_run, move, until

from kernelladder.engine import create_run
from kernelladder.engine.proposers.search import SearchProposer
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.run.options import RunOptions


async def test_the_approved_move_is_the_base_the_branch_builds_on(tmp_path):
    moves = [
        move("pass 2.0", "first"),
        move("pass 1.2", "a new algorithm", undo="high"),  # slower than the branch's best
        move("pass 1.3", "next"),
        move("pass 1.25", "then"),
    ]
    run, _, proposer = make_run(tmp_path, moves, gate="approve", stagnation=8)
    state = await asyncio.wait_for(run.run(), 30)
    assert state.attempts[2].approved
    # each proposal is shown the best of the line the approval began, not the branch's best
    assert [c.parent_attempt for c in proposer.contexts[:4]] == [None, 1, 2, 3]
    assert [state.attempts[n].parent for n in (3, 4)] == [2, 3]
    b = state.branches["b1"]
    assert b.best_attempt == 1 and b.head == 3  # the branch's best is still #1's 2.0x
    assert b.stagnation == 1  # 1.3 over the line's 1.2 was a gain; 1.25 was not


async def test_a_branch_waiting_to_take_a_free_family_keeps_it_from_the_others(tmp_path):
    """rmsnorm has four families for three branches: the first branch offered a change
    takes the free one (persistent) at a gate; while it waits there, the other two have no
    family to change to, run their lines out and end."""
    opts = RunOptions(
        op="rmsnorm", device="cpu", run_dir=str(tmp_path / "run"), branches=3, gate="ask",
        stagnation=8, max_attempts=90,
    )  # fmt: skip
    run = create_run(opts, runner=ScriptedRunner(device="cpu"), proposer=SearchProposer())
    task = asyncio.ensure_future(run.run())
    s = run.state
    await until(lambda: "g1" in s.pending_gates, "gate g1", 30)
    g1 = s.gates["g1"]
    taker = g1.branch_id
    assert s.attempts[g1.attempt].family == "persistent"
    others = [bid for bid in s.branches if bid != taker]
    await until(lambda: all(s.branches[b].closed for b in others), "the others end", 60)
    assert list(s.gates) == ["g1"]  # no one else was asked for a family
    for bid in others:
        b = s.branches[bid]
        assert b.rule == ev.RULE_STAGNATION
        assert f"persistent ({taker} waits at a gate to change to it)" in b.detail, b.detail
    await run.veto("g1")
    state = await asyncio.wait_for(task, 60)
    assert state.branches[taker].rule == ev.RULE_STAGNATION  # its line ran out too


async def test_a_spent_line_ends_its_branch_with_the_families_closed_to_it(tmp_path):
    """kv_quant has three families for three branches: none is free, so no branch is
    offered a change; each ends by stagnation once its line is spent (on the CPU, the
    limit's attempts after the line's first passing kernel), and says why."""
    opts = RunOptions(
        op="kv_quant", device="cpu", run_dir=str(tmp_path / "run"), branches=3,
        gate="approve", stagnation=8, max_attempts=90,
    )  # fmt: skip
    run = create_run(opts, runner=ScriptedRunner(device="cpu"), proposer=SearchProposer())
    state = await asyncio.wait_for(run.run(), 60)
    assert state.finish_reason == ev.RULE_ALL_BRANCHES_DONE
    assert not state.gates
    exits = [e for e in read_events(run.run_dir) if isinstance(e, ev.BranchExhausted)]
    assert sorted(e.branch_id for e in exits) == ["b1", "b2", "b3"]

    def ended(i: int) -> set[str]:
        return {e.branch_id for e in exits[:i]}

    for i, e in enumerate(exits):
        b = state.branches[e.branch_id]
        assert e.rule == ev.RULE_STAGNATION and len(b.attempts) == 9
        # the other branches still running then hold their families
        live = [o for o in state.branches.values() if o is not b and o.id not in ended(i)]
        held = sorted(f"{o.line_family} ({o.id}'s line)" for o in live)
        closed = f"; closed to it: {', '.join(held)}" if held else ""
        assert e.detail == (
            "8 attempts after its line's first passing kernel (no speed is measured to "
            f"judge one faster) in its {b.line_family} line{closed}"
        )
    assert len(exits[0].detail.split("'s line)")) == 3  # the first names both others


def test_a_vetoed_change_of_line_closes_the_family_whatever_it_was_made_from():
    """A move into beta made from b2's attempt of beta changes nothing against its parent's
    family, but it changes b1's line: vetoed, it closes beta on b1 (not just that step)."""

    def received(n, bid, family, parent=None, undo="medium"):
        return ev.ProposalReceived(
            branch_id=bid, attempt=n, parent_attempt=parent, source_hash=f"h{n}",
            strategy="s", move=f"step {n}", undo_cost=undo, undo_reason="r", proposer="p",
            family=family, meta={"family": family},
        )  # fmt: skip

    state = fold(
        [
            ev.BranchOpened(branch_id="b1", strategy="alpha"),
            ev.BranchOpened(branch_id="b2", strategy="beta"),
            received(1, "b1", "alpha"),
            received(2, "b2", "beta"),
            received(3, "b1", "beta", parent=2, undo="high"),
            ev.GateRaised(
                gate_id="g1",
                branch_id="b1",
                attempt=3,
                move="step 3",
                undo_cost="high",
                reason="r",
                policy="ask",
            ),  # fmt: skip
            ev.GateResolved(gate_id="g1", decision="veto", by="user"),
        ]
    )
    b1 = state.branches["b1"]
    assert b1.vetoed_families == ["beta"] and b1.vetoed_moves == []
    assert b1.line_family == "alpha" and b1.families_left == {}
