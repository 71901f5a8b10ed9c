"""Steering (RunControl) and gates on scripted doubles (see helpers.py):
each command records its event, takes effect, and bad commands raise one-line errors."""

from __future__ import annotations

import asyncio

import pytest
from helpers import ScriptedProposer, ScriptedRunner, kinds, make_run, move, until

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events


def _started(run):
    return run.state.started_ts is not None


# --- gates ------------------------------------------------------------------------------


async def test_gate_policy_veto_records_dead_end_for_the_next_proposal(tmp_path):
    run, runner, proposer = make_run(
        tmp_path, [move("pass 1.3", "risky rewrite", undo="high"), move("pass 1.1")], gate="veto"
    )
    state = await run.run()
    evs = read_events(run.run_dir)
    raised = [e for e in evs if isinstance(e, ev.GateRaised)]
    resolved = [e for e in evs if isinstance(e, ev.GateResolved)]
    assert len(raised) == 1 and raised[0].policy == "veto"
    assert (resolved[0].decision, resolved[0].by) == ("veto", "policy")
    assert state.attempts[1].status == "vetoed" and state.attempts[1].verdict is None
    assert len(runner.calls) == 1  # the vetoed move was never verified
    assert any("risky rewrite" in d for d in proposer.contexts[1].dead_ends)
    assert any("risky rewrite" in d for d in proposer.contexts[1].feedback["dead_ends"])


async def test_gate_policy_approve_verifies(tmp_path):
    run, runner, _ = make_run(tmp_path, [move("pass 1.3", undo="high")], gate="approve")
    state = await run.run()
    assert state.attempts[1].verdict == "pass" and state.attempts[1].approved


async def test_engine_escalates_fence_and_family_changes(tmp_path):
    moves = [
        move("pass 1.2", "plain", meta={"family": "one-pass"}),
        move("pass 1.3", "threads", body="import threading"),
        move("pass 1.3", "two-pass", meta={"family": "two-pass"}),
        move("pass 1.3", "tuned", meta={"family": "one-pass"}),
    ]
    run, _, _ = make_run(tmp_path, moves, gate="veto")
    state = await run.run()
    a = state.attempts
    assert a[1].undo_cost == "low" and a[4].undo_cost == "low"
    assert a[2].undo_cost == "high" and "touches the fence: uses threads" in a[2].undo_reason
    assert a[3].undo_cost == "high" and "one-pass -> two-pass" in a[3].undo_reason
    assert [a[n].status for n in (1, 2, 3, 4)] == ["judged", "vetoed", "vetoed", "judged"]


async def test_gate_ask_waits_for_a_person(tmp_path):
    run, runner, _ = make_run(
        tmp_path, [move("pass 1.3", undo="high"), move("pass 1.4", undo="high")], gate="ask"
    )
    task = asyncio.ensure_future(run.run())
    await until(lambda: "g1" in run.state.pending_gates, what="gate g1")
    assert run.state.branches["b1"].status == "waiting-gate"
    assert runner.calls == []
    with pytest.raises(ValueError, match="no pending gate g9"):
        await run.approve("g9")
    await run.approve("g1")
    await until(lambda: "g2" in run.state.pending_gates, what="gate g2")
    await run.veto("g2", note="too risky")
    state = await asyncio.wait_for(task, 10)
    assert state.attempts[1].verdict == "pass" and state.attempts[2].status == "vetoed"
    assert state.gates["g2"].note == "too risky"
    assert any("too risky" in d for d in state.branches["b1"].dead_ends)
    with pytest.raises(ValueError, match="finished"):
        await run.approve("g1")


async def test_gate_timeout_applies_the_policy(tmp_path):
    run, _, _ = make_run(
        tmp_path, [move("pass 1.3", undo="high")], gate="ask", gate_timeout_s=0.2,
        gate_timeout_policy="approve",
    )  # fmt: skip
    state = await asyncio.wait_for(run.run(), 10)
    g = state.gates["g1"]
    assert (g.decision, g.by) == ("approve", "timeout")
    assert state.attempts[1].verdict == "pass"


# --- steering -------------------------------------------------------------------------------


async def test_prune_takes_the_subtree_cancels_proposals_and_records_inflight(tmp_path):
    runner = ScriptedRunner(slots=2)
    script = {"b1": [move("pass 1.2"), move("hold")], "b2": [move("pass 1.0")] * 50, "b3": []}
    proposer = ScriptedProposer(script, strategies=["first", "second"])
    run, _, _ = make_run(
        tmp_path, None, runner=runner, proposer=proposer, branches=2, stagnation=100,
    )  # fmt: skip
    task = asyncio.ensure_future(run.run())
    await until(lambda: any("hold" in c for c in runner.calls), what="b1's held verify")
    proposer.hold.clear()  # proposals from now on hang until released
    b3 = await run.open_branch(1, "child")  # attempt 1 is b1's: b3 is in b1's subtree
    assert b3 == "b3" and run.state.branches["b3"].from_attempt == 1
    await until(lambda: run.state.branches["b3"].requesting, what="b3 proposal in flight")
    await run.prune("b1")
    assert run.state.branches["b1"].status == "pruned"
    assert run.state.branches["b3"].status == "pruned"
    assert run.state.branches["b2"].status != "pruned"
    await until(lambda: proposer.cancelled >= 1, what="b3's proposal cancelled")
    # b1's in-flight verification still finishes and is recorded
    held = next(n for n, a in run.state.attempts.items() if "hold" in a.move)
    runner.release.set()
    await until(lambda: run.state.attempts[held].verdict is not None, what="held verdict")
    with pytest.raises(ValueError, match="already pruned"):
        await run.prune("b3")
    with pytest.raises(ValueError, match="no branch b9"):
        await run.prune("b9")
    proposer.hold.set()
    await run.stop()
    state = await asyncio.wait_for(task, 10)
    pruned = [e for e in read_events(run.run_dir) if isinstance(e, ev.BranchPruned)]
    assert pruned[0].pruned == ("b1", "b3")
    assert state.attempts[held].verdict == "pass"
    assert not [a for a in state.attempts.values() if a.branch_id == "b3"]
    assert state.branches["b2"].status == "stopped"


async def test_hints_reach_the_next_proposal(tmp_path):
    proposer = ScriptedProposer([move("pass 1.1")] * 5, strategies=["s1", "s2"])
    proposer.hold.clear()
    run, _, _ = make_run(tmp_path, None, proposer=proposer, branches=2, hints="global one")
    task = asyncio.ensure_future(run.run())
    await until(lambda: len(proposer.contexts) == 2)
    assert all(c.hints == "global one" for c in proposer.contexts)
    await run.edit_hints("use 8 warps", branch_id="b1")
    await run.edit_hints("keep fp32 accumulators")
    with pytest.raises(ValueError, match="no branch b7"):
        await run.edit_hints("x", branch_id="b7")
    proposer.hold.set()
    await until(lambda: len(proposer.contexts) >= 4)
    later = {c.branch_id: c.hints for c in proposer.contexts[2:]}
    assert later["b1"] == "keep fp32 accumulators\n\nuse 8 warps"
    assert later["b2"] == "keep fp32 accumulators"
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_pause_and_resume_run_and_branch(tmp_path):
    proposer = ScriptedProposer(lambda ctx: move("pass 1.0"), strategies=["s1", "s2"])
    run, _, _ = make_run(
        tmp_path, None, proposer=proposer, branches=2, stagnation=10_000, max_attempts=10_000
    )
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.state.attempts_used >= 2)
    await run.pause()
    with pytest.raises(ValueError, match="already paused"):
        await run.pause()
    # the proposals in flight land (and then wait); nothing new is asked for
    await until(lambda: not any(b.requesting for b in run.state.branches.values()))
    used = run.state.attempts_used
    await asyncio.sleep(0.2)
    assert run.state.attempts_used == used
    await run.pause("b1")
    await run.resume()
    await until(lambda: run.state.attempts_used >= used + 4)
    await run.pause("b2")
    await until(lambda: not run.state.branches["b2"].requesting)
    used = run.state.attempts_used
    await asyncio.sleep(0.2)
    assert run.state.attempts_used == used
    assert {b.status for b in run.state.branches.values()} == {"paused"}
    counts = {bid: len(b.attempts) for bid, b in run.state.branches.items()}
    await run.resume("b1")
    await until(lambda: len(run.state.branches["b1"].attempts) >= counts["b1"] + 3)
    assert len(run.state.branches["b2"].attempts) == counts["b2"]
    with pytest.raises(ValueError, match="not paused"):
        await run.resume("b1")
    await run.stop()
    await asyncio.wait_for(task, 10)
    k = kinds(read_events(run.run_dir))
    assert k.count("run_paused") == 1 and k.count("branch_paused") == 2


async def test_set_target_below_best_ends_the_run(tmp_path):
    run, _, _ = make_run(
        tmp_path, lambda ctx: move("pass 1.5"), stagnation=10_000, max_attempts=10_000
    )
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.state.best_speedup == 1.5)
    with pytest.raises(ValueError, match="positive"):
        await run.set_target(-1)
    await run.set_target(1.4)
    state = await asyncio.wait_for(task, 10)
    assert state.target == 1.4 and state.finish_reason == ev.RULE_TARGET


async def test_open_branch_validates(tmp_path):
    run, _, proposer = make_run(tmp_path, [move("pass 1.1")])
    proposer.hold.clear()  # keep the run alive while we poke at it
    with pytest.raises(ValueError, match="not started"):
        await run.open_branch(1)
    task = asyncio.ensure_future(run.run())
    await until(lambda: _started(run))
    with pytest.raises(ValueError, match="no attempt 42"):
        await run.open_branch(42)
    proposer.hold.set()
    await asyncio.wait_for(task, 10)


async def test_stop_finishes_inflight_and_second_stop_cancels(tmp_path):
    runner = ScriptedRunner()
    run, _, _ = make_run(tmp_path, [move("hold"), move("pass 1.2")], runner=runner)
    task = asyncio.ensure_future(run.run())
    await until(lambda: runner.calls, what="verify started")
    await run.stop()
    assert run.state.stopping
    await asyncio.sleep(0.1)
    assert not task.done()  # a clean stop waits for the verification
    await run.stop()  # the second stop cancels it
    state = await asyncio.wait_for(task, 10)
    k = kinds(read_events(run.run_dir))
    assert k[-3:] == ["stop_requested", "attempt_cancelled", "run_finished"]
    assert state.finish_reason == ev.RULE_USER_STOP
    assert state.attempts[1].status == "cancelled"

    runner = ScriptedRunner()
    run, _, _ = make_run(tmp_path / "clean", [move("hold"), move("pass 1.2")], runner=runner)
    task = asyncio.ensure_future(run.run())
    await until(lambda: runner.calls, what="verify started")
    await run.stop()
    runner.release.set()
    state = await asyncio.wait_for(task, 10)
    assert state.attempts[1].verdict == "pass" and state.attempts_used == 1
    assert state.branches["b1"].status == "stopped"


async def test_slow_subscriber_loses_nothing_and_does_not_block(tmp_path):
    run, _, _ = make_run(
        tmp_path, lambda ctx: move("pass 1.0"), branches=2, max_attempts=40, stagnation=10_000
    )
    seen: list[int] = []
    fast: list[int] = []

    slow_sub = run.subscribe(maxsize=3)

    async def slow():
        async for e in slow_sub:
            seen.append(e.seq)
            await asyncio.sleep(0.002)

    async def quick():
        async for e in run.subscribe():
            fast.append(e.seq)

    consumers = [asyncio.ensure_future(slow()), asyncio.ensure_future(quick())]
    state = await asyncio.wait_for(run.run(), 20)
    await asyncio.wait_for(asyncio.gather(*consumers), 20)
    assert seen == list(range(state.events)) == fast
    assert slow_sub.lag_count >= 2  # it did fall behind and caught up from the file
    late = [e.seq async for e in run.subscribe(from_seq=5)]
    assert late == list(range(5, state.events))
