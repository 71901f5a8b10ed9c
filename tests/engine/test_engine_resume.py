"""Resume on scripted doubles (see helpers.py): after a stop, after a
simulated kill (a copy of the run directory taken mid-run, plus a torn last line), with
a pending gate, and with changed budgets. The real kill -9 is in test_optimize_cli.py."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from helpers import ScriptedProposer, ScriptedRunner, make_run, move, until

from kernelladder.engine import resume_run
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.record.summary import summarize


def _numbers(run_dir) -> list[int]:
    return [e.attempt for e in read_events(run_dir) if isinstance(e, ev.ProposalReceived)]


async def test_resume_after_forced_stop_reruns_the_cancelled_attempt(tmp_path):
    runner = ScriptedRunner()
    run, _, _ = make_run(tmp_path, [move("pass 1.1"), move("hold")], runner=runner)
    task = asyncio.ensure_future(run.run())
    await until(lambda: any("hold" in c for c in runner.calls))
    await run.stop(cancel=True)
    state = await asyncio.wait_for(task, 10)
    assert state.attempts[2].status == "cancelled"

    runner2 = ScriptedRunner()
    runner2.release.set()
    proposer2 = ScriptedProposer([move("pass 1.3")])
    resumed = resume_run(run.run_dir, runner=runner2, proposer=proposer2)
    state = await asyncio.wait_for(resumed.run(), 10)
    evs = read_events(run.run_dir)
    reopened = [e for e in evs if isinstance(e, ev.RunReopened)]
    assert reopened[0].requeued_attempts == (2,) and not reopened[0].repaired_tail
    assert _numbers(run.run_dir) == [1, 2, 3]  # 2 re-run under its number, 3 is new
    assert [a.verdict for a in state.attempts.values()] == ["pass", "pass", "pass"]
    assert state.best_attempt == 3 and state.reopened == 1
    assert summarize(state) == summarize(fold(evs))
    assert [e.seq for e in evs] == list(range(len(evs)))


async def test_resume_from_a_killed_copy_with_a_torn_tail(tmp_path):
    runner = ScriptedRunner()
    moves = [move("pass 1.1"), move("pass 1.2"), move("hold"), move("pass 1.4")]
    run, _, _ = make_run(tmp_path, moves, runner=runner)
    task = asyncio.ensure_future(run.run())
    await until(lambda: any("hold" in c for c in runner.calls))
    # what a kill -9 leaves: every published event is on disk; copy it now
    killed = tmp_path / "killed"
    shutil.copytree(run.run_dir, killed)
    published = read_events(killed)
    with open(killed / "events.jsonl", "ab") as f:
        f.write(b'{"kind":"verdict_ready","seq":99,"attem')
    runner.release.set()
    await asyncio.wait_for(task, 10)

    runner2 = ScriptedRunner()
    runner2.release.set()
    resumed = resume_run(killed, runner=runner2, proposer=ScriptedProposer([move("pass 1.5")]))
    state = await asyncio.wait_for(resumed.run(), 10)
    evs = read_events(killed)
    assert evs[: len(published)] == published  # nothing published was lost
    reopened = next(e for e in evs if isinstance(e, ev.RunReopened))
    assert reopened.repaired_tail and reopened.requeued_attempts == (3,)
    assert _numbers(killed) == [1, 2, 3, 4]
    started = [e.attempt for e in evs if isinstance(e, ev.AttemptStarted)]
    assert started == [1, 2, 3, 3, 4]  # 3 started before the kill and again after
    assert state.attempts[3].verdict == "pass" and state.attempts[4].speedup == 1.5


async def test_resume_asks_again_for_a_gate_the_stop_set_aside(tmp_path):
    run, runner, _ = make_run(tmp_path, [move("pass 1.3", undo="high")], gate="ask")
    task = asyncio.ensure_future(run.run())
    await until(lambda: "g1" in run.state.pending_gates)
    await run.stop()
    state = await asyncio.wait_for(task, 10)
    assert state.branches["b1"].status == "stopped" and not state.pending_gates
    assert state.gates["g1"].by == "stop" and not state.branches["b1"].dead_ends

    resumed = resume_run(run.run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]))
    task = asyncio.ensure_future(resumed.run())
    await until(lambda: resumed.state.reopened == 1 and resumed.state.branches["b1"].pending_gate)
    assert resumed.state.branches["b1"].pending_gate == "g2"
    await resumed.approve("g2")
    state = await asyncio.wait_for(task, 10)
    assert state.attempts[1].verdict == "pass"
    assert [g.attempt for g in state.gates.values()] == [1, 1]  # the same move, asked again


async def test_resume_with_a_larger_budget_continues(tmp_path):
    run, _, _ = make_run(tmp_path, lambda ctx: move("pass 1.0"), max_attempts=2, stagnation=100)
    state = await run.run()
    assert state.finish_reason == ev.RULE_MAX_ATTEMPTS
    proposer = ScriptedProposer(lambda ctx: move("pass 1.0"))
    with pytest.raises(ValueError, match="cannot change on resume"):
        resume_run(run.run_dir, runner=ScriptedRunner(), proposer=proposer, overrides={"op": "x"})
    resumed = resume_run(
        run.run_dir, runner=ScriptedRunner(), proposer=proposer, overrides={"max_attempts": 4}
    )
    state = await resumed.run()
    assert state.finish_reason == ev.RULE_MAX_ATTEMPTS and sorted(state.attempts) == [1, 2, 3, 4]
    reopened = next(e for e in read_events(run.run_dir) if isinstance(e, ev.RunReopened))
    assert reopened.settings == {"max_attempts": 4}
