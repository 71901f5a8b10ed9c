"""`kernelladder optimize` as a user runs it: a real subprocess, the real `search`
proposer and the real CPU worker (Triton interpreter, tiny shapes). Bad usage, the
end-to-end run, replay equality, Ctrl-C, and kill -9 followed by --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events, read_log

EXAMPLE_PROBLEM = ROOT / "examples/kernelbench/relu_bias_scale.py"


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelladder", *args]


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        _cmd(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _wait_for(run_dir: Path, predicate, timeout: float = 120.0) -> list[ev.Event]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "events.jsonl").exists():
            events = read_log(run_dir).events
            if predicate(events):
                return events
        time.sleep(0.05)
    raise AssertionError(f"the run in {run_dir} did not get there in {timeout}s")


def _received(events) -> list[int]:
    return [e.attempt for e in events if isinstance(e, ev.ProposalReceived)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["optimize"], "needs an OP"),
        (["optimize", "nosuchop"], "unknown op"),
        (["optimize", "rmsnorm", "--max-attempts", "0"], "must be positive"),
        (["optimize", "rmsnorm", "--gate", "maybe"], "invalid choice"),
        (["optimize", "rmsnorm", "--proposer", "replay"], "needs --replay-from"),
        (["optimize", "rmsnorm", "--hints", "/nonexistent/hints.txt"], "cannot read hints"),
        (["optimize", "--resume", "/nonexistent/run"], "not a run directory"),
        (["optimize", "missing_problem.py"], "problem file not found"),
        (["optimize", str(EXAMPLE_PROBLEM), "--device", "cpu"], "use --proposer api or code"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args, message):
    out = _cli(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.slow
def test_end_to_end_search_on_the_cpu_and_replay_equality(tmp_path):
    run_dir = tmp_path / "run"
    out = _cli(
        "optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "3", "--branches", "2",
        "--json", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("\n") == 1  # one JSON object, nothing else on stdout
    summary = json.loads(out.stdout)
    assert summary["op"] == "rmsnorm" and summary["proposer"] == "search"
    assert summary["device"] == "cpu" and summary["speed_measured"] is False
    assert summary["attempts"]["total"] == 3 and summary["attempts"]["judged"] == 3
    assert summary["attempts"]["passed"] >= 1 and summary["best_speedup"] is None
    assert summary["stop_reason"] == ev.RULE_MAX_ATTEMPTS
    assert len(summary["branches"]) == 2
    assert "finished: max-attempts" in out.stderr  # progress went to stderr
    replay = _cli("replay", str(run_dir), "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout) == summary
    for n in (1, 2, 3):
        assert (run_dir / "attempts" / f"{n}.py").exists()
        assert json.loads((run_dir / "attempts" / f"{n}.json").read_text())["op"] == "rmsnorm"


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_with_a_complete_log(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        _cmd("optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "40",
             "--run-dir", str(run_dir)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        _wait_for(run_dir, lambda es: any(isinstance(e, ev.VerdictReady) for e in es))
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    events = read_events(run_dir)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == ev.RULE_USER_STOP
    assert any(isinstance(e, ev.StopRequested) for e in events)
    started = {e.attempt for e in events if isinstance(e, ev.AttemptStarted)}
    closed = {e.attempt for e in events if isinstance(e, ev.VerdictReady | ev.AttemptCancelled)}
    assert started <= closed  # every started attempt was finished or recorded as cancelled
    assert "finished: user-stop" in stdout


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_loses_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        _cmd("optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "5",
             "--branches", "2", "--run-dir", str(run_dir)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(run_dir, lambda es: len(_received(es)) >= 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = read_log(run_dir).events  # what was published before the kill
    assert not any(isinstance(e, ev.RunFinished) for e in before)
    out = _cli("optimize", "--resume", str(run_dir), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    after = read_events(run_dir)
    assert after[: len(before)] == before  # nothing published was lost
    assert [e.seq for e in after] == list(range(len(after)))
    numbers = _received(after)
    assert sorted(numbers) == list(range(1, 6)) and len(set(numbers)) == 5  # none twice
    judged = [e.attempt for e in after if isinstance(e, ev.VerdictReady)]
    assert sorted(judged) == list(range(1, 6))  # every attempt, including the interrupted
    reopened = [e for e in after if isinstance(e, ev.RunReopened)]
    assert len(reopened) == 1
    summary = json.loads(out.stdout)
    assert summary["attempts"]["total"] == 5 and summary["resumed"] == 1
    assert json.loads(_cli("replay", str(run_dir), "--json").stdout) == summary
