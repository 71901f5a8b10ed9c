"""A gate's timeout restarts when a resume asks again: the stop resolved the gate of a
run stopped at an ask-gate ("run stopped", held against nothing), and the resume asks
again with a new gate that gives the person the full timeout, counted from the resume;
a timeout given on resume applies to it. On the scripted doubles of
helpers.py (why doubles: see there)."""

from __future__ import annotations

import asyncio
import time

from helpers import ScriptedProposer, ScriptedRunner, move, scripted_op, until

from kernelladder.engine import GATE, create_run, resume_run
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.record.summary import summarize
from kernelladder.engine.run.options import RunOptions

DOWN_S = 3600.0  # how long the run was down between the stop and the resume


def _clock(offset: list[float]):
    """The wall clock moved on by offset[0] seconds: a run resumed after a long pause
    without the test waiting for it."""
    return lambda: time.time() + offset[0]


async def _stopped_at_a_gate(tmp_path, offset: list[float], gate_timeout_s: float):
    """A run stopped while its one risky move waits at an ask-gate with a timeout."""
    options = RunOptions(
        op="scripted", proposer="scripted", run_dir=str(tmp_path / "run"), branches=1,
        device="cuda", gate="ask", gate_timeout_s=gate_timeout_s,
        gate_timeout_policy="approve",
    )  # fmt: skip
    run = create_run(
        options, runner=ScriptedRunner(), proposer=ScriptedProposer([move("pass 1.3", undo="high")]),
        op=scripted_op(), clock=_clock(offset),
    )  # fmt: skip
    task = asyncio.ensure_future(run.run())
    await until(lambda: "g1" in run.state.pending_gates)
    await run.stop()
    state = await asyncio.wait_for(task, 10)
    assert not state.pending_gates
    assert (state.gates["g1"].by, state.gates["g1"].note) == ("stop", "run stopped")
    return run.run_dir


def _asked_again(run_dir) -> ev.GateRaised:
    raised = [e for e in read_events(run_dir) if isinstance(e, ev.GateRaised)]
    assert [(e.gate_id, e.attempt) for e in raised] == [("g1", 1), ("g2", 1)]
    return raised[1]


async def test_a_resumed_gate_waits_its_full_timeout_for_the_person(tmp_path):
    offset = [0.0]
    run_dir = await _stopped_at_a_gate(tmp_path, offset, gate_timeout_s=30.0)
    offset[0] = DOWN_S  # the deadline passed long ago while the run was down
    resumed = resume_run(
        run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]), clock=_clock(offset)
    )
    task = asyncio.ensure_future(resumed.run())
    # the branch waits at the gate (it used to time out the moment the resume started)
    await until(lambda: resumed._phase.get("b1") == GATE and "g2" in resumed.state.gates)
    await asyncio.sleep(0.05)
    g = resumed.state.gates["g2"]
    assert g.pending, (g.decision, g.by, g.note)
    reopened = next(e for e in read_events(run_dir) if isinstance(e, ev.RunReopened))
    again = _asked_again(run_dir)
    assert again.ts >= reopened.ts and g.deadline == again.ts + 30.0
    await resumed.approve("g2")
    state = await asyncio.wait_for(task, 10)
    assert (state.gates["g2"].decision, state.gates["g2"].by) == ("approve", "user")
    assert state.attempts[1].verdict == "pass"
    # the log alone gives the same deadline and summary (replay folds the same)
    assert summarize(fold(read_events(run_dir))) == summarize(state)


async def test_a_resumed_gate_times_out_counted_from_the_resume(tmp_path):
    offset = [0.0]
    run_dir = await _stopped_at_a_gate(tmp_path, offset, gate_timeout_s=0.3)
    offset[0] = DOWN_S
    resumed = resume_run(
        run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]), clock=_clock(offset)
    )
    state = await asyncio.wait_for(resumed.run(), 10)
    evs = read_events(run_dir)
    reopened = next(e for e in evs if isinstance(e, ev.RunReopened))
    resolved = [e for e in evs if isinstance(e, ev.GateResolved)][-1]
    assert (resolved.decision, resolved.by) == ("approve", "timeout")
    assert resolved.ts - reopened.ts >= 0.3  # the full timeout, from the resume on
    assert state.attempts[1].verdict == "pass"


async def test_a_timeout_given_on_resume_applies_to_the_pending_gate(tmp_path):
    offset = [0.0]
    run_dir = await _stopped_at_a_gate(tmp_path, offset, gate_timeout_s=0.2)
    offset[0] = DOWN_S
    resumed = resume_run(
        run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]), clock=_clock(offset),
        overrides={"gate_timeout_s": 600.0},
    )  # fmt: skip
    task = asyncio.ensure_future(resumed.run())
    await until(lambda: resumed._phase.get("b1") == GATE and "g2" in resumed.state.gates)
    g = resumed.state.gates["g2"]
    again = _asked_again(run_dir)
    assert g.pending and g.timeout_s == 600.0 and g.deadline == again.ts + 600.0
    await resumed.veto("g2", "not now")
    state = await asyncio.wait_for(task, 10)
    assert state.gates["g2"].by == "user" and state.attempts[1].verdict is None
