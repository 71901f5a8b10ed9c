"""Four robustness leftovers: a gate's timeout restarts when a resume asks again; a
damaged --replay-from log, a --known-hosts that is a directory and a --run-dir full of
unrelated files are each refused with one line (exit 2) before a run directory is made.
The engine cases run on the scripted doubles of test_engine_doubles.py (why doubles:
see there); the CLI cases run `main` in-process, as test_cli_bad_input_audit.py does."""

from __future__ import annotations

import asyncio
import time

from test_cli_bad_input_audit import _insert_line, _saved_run, _usage_line
from test_engine_doubles import ScriptedProposer, ScriptedRunner, move, scripted_op, until

from kernelladder.cli import main
from kernelladder.engine import events as ev
from kernelladder.engine.engine import GATE, create_run, resume_run
from kernelladder.engine.log import read_events
from kernelladder.engine.options import RunOptions
from kernelladder.engine.proposers.replay import ReplayProposer
from kernelladder.engine.state import fold
from kernelladder.engine.summary import summarize

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
    assert "g1" in state.pending_gates
    return run.run_dir


async def test_a_resumed_gate_waits_its_full_timeout_for_the_person(tmp_path):
    offset = [0.0]
    run_dir = await _stopped_at_a_gate(tmp_path, offset, gate_timeout_s=30.0)
    offset[0] = DOWN_S  # the deadline passed long ago while the run was down
    resumed = resume_run(
        run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]), clock=_clock(offset)
    )
    task = asyncio.ensure_future(resumed.run())
    # the branch waits at the gate (it used to time out the moment the resume started)
    await until(lambda: resumed._phase.get("b1") == GATE or not resumed.state.pending_gates)
    await asyncio.sleep(0.05)
    g = resumed.state.gates["g1"]
    assert g.pending, (g.decision, g.by, g.note)
    reopened = next(e for e in read_events(run_dir) if isinstance(e, ev.RunReopened))
    assert g.deadline == reopened.ts + 30.0
    await resumed.approve("g1")
    state = await asyncio.wait_for(task, 10)
    assert (state.gates["g1"].decision, state.gates["g1"].by) == ("approve", "user")
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
    resolved = next(e for e in evs if isinstance(e, ev.GateResolved))
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
    await until(lambda: resumed._phase.get("b1") == GATE or not resumed.state.pending_gates)
    g = resumed.state.gates["g1"]
    reopened = next(e for e in read_events(run_dir) if isinstance(e, ev.RunReopened))
    assert g.pending and g.timeout_s == 600.0 and g.deadline == reopened.ts + 600.0
    await resumed.veto("g1", "not now")
    state = await asyncio.wait_for(task, 10)
    assert state.gates["g1"].by == "user" and state.attempts[1].verdict is None


# --- 2. --replay-from a damaged log ---------------------------------------------------------


def test_replay_from_a_log_with_a_garbage_middle_line_is_one_line(capsys, tmp_path):
    saved = _saved_run(tmp_path, "saved")
    _insert_line(saved, 3, "this is not json\n")
    log = saved / "events.jsonl"
    new = tmp_path / "new"
    # it used to be read without a word, the damaged line skipped
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--replay-from", str(saved)]
    line = _usage_line(capsys, *argv, "--run-dir", str(new))
    assert f"{log}: corrupt line 4 (byte " in line
    assert not new.exists()
    # `kernelladder replay` names the same line of the same file
    assert f"{log}: corrupt line 4 (byte " in _usage_line(capsys, "replay", str(saved))


def test_replay_from_a_log_with_a_torn_last_line_still_replays(tmp_path):
    saved = _saved_run(tmp_path, "saved")
    whole = ReplayProposer(run_dir=str(saved))
    with open(saved / "events.jsonl", "ab") as f:
        f.write(b'{"kind":"verdict_ready","seq":99,"attem')  # what a kill -9 leaves
    torn = ReplayProposer(run_dir=str(saved))
    assert torn.labels == whole.labels and torn.remaining() == whole.remaining() > 0


# --- 3. --known-hosts that cannot be read ---------------------------------------------------


def test_known_hosts_that_is_a_directory_is_refused_with_the_arguments(capsys, tmp_path):
    a_dir = tmp_path / "ssh"
    a_dir.mkdir()
    new = tmp_path / "new"
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--remote", "--ssh-target"]
    argv += ["me@127.0.0.1:9", "--known-hosts", str(a_dir), "--run-dir", str(new)]
    # it used to make the run directory and fail when the runner connected (exit 1)
    line = _usage_line(capsys, *argv)
    assert line.endswith(f"--known-hosts: {a_dir} is a directory, not a file")
    assert not new.exists()


def test_a_missing_known_hosts_file_is_still_allowed(tmp_path):
    # missing means "trust nothing"; trusting a key (doctor --trust, the TUI) creates it
    from kernelladder.engine.runners.ssh.config import RemoteSettings, load_remote_config

    absent = tmp_path / "absent"
    settings = RemoteSettings(target="me@127.0.0.1:9", known_hosts=str(absent))
    config = load_remote_config(settings, environ={})
    assert config.hosts[0].known_hosts == absent


# --- 4. --run-dir holding unrelated files ---------------------------------------------------


def test_run_dir_holding_unrelated_files_is_refused(capsys, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--run-dir"]
    line = _usage_line(capsys, *argv, str(mine))  # it used to write the run in among them
    assert line.endswith(
        f"--run-dir {mine} is not empty and holds no run; pick an empty or new directory, "
        "or --resume a run"
    )
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "mine\n"


def test_run_dir_holding_a_run_still_points_to_resume(capsys, tmp_path):
    saved = _saved_run(tmp_path)
    before = (saved / "events.jsonl").read_bytes()
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--run-dir"]
    assert f"use --resume {saved}" in _usage_line(capsys, *argv, str(saved))
    assert (saved / "events.jsonl").read_bytes() == before


def test_an_empty_run_dir_is_used(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--branches", "1"]
    assert main([*argv, "--gate", "veto", "--json", "--run-dir", str(empty)]) == 0
    assert (empty / "events.jsonl").is_file() and (empty / "meta.json").is_file()
