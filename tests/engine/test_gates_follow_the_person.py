"""Gates follow what the person does: new hints re-check the pending gates, a stop
resolves them; and a branch's label follows the family of its best (scripted doubles,
helpers.py)."""

from __future__ import annotations

import asyncio

from helpers import make_run, move, until

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import apply, new_state


def _family_switch(family: str, params: dict | None = None):
    return move("pass 1.3", f"family plain -> {family}", undo="high",
                meta={"family": family, "params": params or {}})  # fmt: skip


async def test_a_hint_that_avoids_a_pending_gates_family_vetoes_it_with_the_hint(tmp_path):
    moves = [
        move("pass 1.2", "plain", meta={"family": "plain"}),
        _family_switch("persistent"),
        move("pass 1.1", "after"),
    ]
    run, runner, proposer = make_run(tmp_path, moves, gate="ask")
    task = asyncio.ensure_future(run.run())
    await until(lambda: "g1" in run.state.pending_gates, what="gate g1")
    await run.edit_hints("avoid Persistent\nsome free text")
    state = await asyncio.wait_for(task, 10)
    g = state.gates["g1"]
    assert (g.decision, g.by, g.note) == ("veto", "hints", "avoid Persistent")
    assert state.attempts[2].status == "vetoed" and not state.pending_gates
    assert "persistent" in state.branches["b1"].vetoed_families
    resolved = [e for e in read_events(run.run_dir) if isinstance(e, ev.GateResolved)]
    assert [(e.by, e.note) for e in resolved] == [("hints", "avoid Persistent")]


async def test_hints_that_prefer_or_do_not_name_the_move_leave_the_gate_to_the_person(tmp_path):
    moves = [
        move("pass 1.2", "plain", meta={"family": "plain"}),
        _family_switch("persistent", {"BLOCK": 64}),
    ]
    run, _, _ = make_run(tmp_path, moves, gate="ask")
    task = asyncio.ensure_future(run.run())
    await until(lambda: "g1" in run.state.pending_gates, what="gate g1")
    await run.edit_hints("prefer persistent\navoid BLOCK=128\nfix WARPS=4", branch_id="b1")
    assert "g1" in run.state.pending_gates  # preferred; BLOCK is 64; WARPS not set
    await run.edit_hints("fix BLOCK=128", branch_id="b1")  # the move sets BLOCK=64
    state = await asyncio.wait_for(task, 10)
    assert (state.gates["g1"].by, state.gates["g1"].note) == ("hints", "fix BLOCK=128")


async def test_stopping_resolves_every_pending_gate_without_holding_the_move_against_its_branch(
    tmp_path,
):
    moves = {"b1": [_family_switch("persistent")], "b2": [_family_switch("tiled")]}
    run, runner, _ = make_run(tmp_path, moves, gate="ask", branches=2)
    task = asyncio.ensure_future(run.run())
    await until(lambda: len(run.state.pending_gates) == 2, what="two gates")
    await run.stop()
    state = await asyncio.wait_for(task, 10)
    assert not state.pending_gates and state.finished
    for gid in ("g1", "g2"):
        assert (state.gates[gid].decision, state.gates[gid].by) == ("veto", "stop")
        assert state.gates[gid].note == "run stopped"
    assert runner.calls == []
    assert all(not b.dead_ends and not b.vetoed_families for b in state.branches.values())
    # the fold of the log says the same
    folded = new_state()
    for e in read_events(run.run_dir):
        apply(folded, e)
    assert not folded.pending_gates


def test_a_branch_label_follows_the_family_of_its_best():
    s = new_state()
    for e in (
        ev.BranchOpened(branch_id="b2", strategy="one-row-per-program#2", seq=0, ts=1.0),
        ev.ProposalReceived(branch_id="b2", attempt=1, parent_attempt=None, source_hash="h",
                            strategy="x", move="m", undo_cost="low", undo_reason="", proposer="p",
                            family="one-row-per-program", seq=1, ts=1.0),
        ev.ProposalReceived(branch_id="b2", attempt=2, parent_attempt=1, source_hash="h2",
                            strategy="x", move="m", undo_cost="high", undo_reason="", proposer="p",
                            family="persistent", seq=2, ts=1.0),
    ):  # fmt: skip
        apply(s, e)
    # no best yet: the family it was opened with, and the one its latest attempt walks
    assert s.branch_label("b2") == "one-row-per-program#2 · now persistent"
    s.branches["b2"].best_attempt = 1
    assert s.branch_label("b2") == "one-row-per-program#2 · now persistent"
    s.branches["b2"].best_attempt = 2
    assert s.branch_label("b2") == "persistent (was one-row-per-program#2)"
    # back on the family it was opened with while its best stays on the other
    apply(s, ev.ProposalReceived(
        branch_id="b2", attempt=3, parent_attempt=1, source_hash="h3", strategy="x",
        move="m", undo_cost="high", undo_reason="", proposer="p", family="one-row-per-program",
        seq=3, ts=1.0,
    ))  # fmt: skip
    assert s.branch_label("b2") == (
        "persistent (was one-row-per-program#2) · now one-row-per-program"
    )
