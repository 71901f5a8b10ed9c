"""`kernelladder optimize --resume` as a person or a CI log sees it, through real CLI
subprocesses and the real CPU worker: the plain view prints one line for what is
resumed and then only the new events; `--gate ask` without a terminal falls back for
that session only (the saved options keep "ask"), so a resume on a terminal (a real
pseudo-terminal here) asks again, and a gate an earlier session left pending does not
hang a session that cannot ask.

The gate tests use the `replay` proposer on a saved run of the search proposer's own
rmsnorm candidate whose moves are marked high undo cost: the search proposer itself
reaches a high-cost move only after it has used up a family (dozens of attempts)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.run.options import RunOptions, unattended_gate_policy

pytestmark = pytest.mark.slow

NO_TERMINAL = "--gate ask needs a terminal on stdin to ask"


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelladder", *args]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        _cmd(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _saved_options(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())["options"]


def _session(events: list[ev.Event], index: int) -> list[ev.Event]:
    """The events of one session: 0 is the first, 1 the first resume, ..."""
    starts = [i for i, e in enumerate(events) if isinstance(e, ev.RunStarted | ev.RunReopened)]
    stop = starts[index + 1] if index + 1 < len(starts) else len(events)
    return events[starts[index] : stop]


class Terminal:
    """A CLI subprocess on a pseudo-terminal (stdin, stdout and stderr), as a person runs it."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        self.proc = subprocess.Popen(
            _cmd(*args), stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.master = master
        self.output = b""

    def expect(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.text}")

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self, timeout: float = 90) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.2):  # what is left in the terminal after the exit
            pass
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        os.close(self.master)

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the process and its terminal are gone
            return False
        self.output += data
        return bool(data)


@pytest.fixture
def risky_saved_run(tmp_path) -> Path:
    """A saved run for the replay proposer: the search proposer's rmsnorm starting
    candidate three times, each move marked high undo cost (so each waits at a gate)."""
    from kernelladder.ops.registry import catalog

    family = catalog()["rmsnorm"][0]
    source = family.render(family.start)
    saved = tmp_path / "saved"
    (saved / "attempts").mkdir(parents=True)
    lines = [{"kind": "branch_opened", "branch_id": "b1", "strategy": "risky"}]
    for n in (1, 2, 3):
        (saved / "attempts" / f"{n}.py").write_text(source)
        lines.append(
            {"kind": "proposal_received", "attempt": n, "branch_id": "b1", "strategy": "risky",
             "move": f"risky move {n}", "undo_cost": "high", "undo_reason": "marked high"}
        )  # fmt: skip
    (saved / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return saved


def test_unattended_gate_policy_keeps_the_choice_and_honours_a_timeout():
    assert unattended_gate_policy(RunOptions(op="x", gate="approve")) == ("approve", "")
    policy, why = unattended_gate_policy(RunOptions(op="x"))
    assert policy == "veto" and why.startswith(NO_TERMINAL) and "this session only" in why
    # an ask-gate nobody can answer would time out: the person's timeout policy, at once
    timed = RunOptions(op="x", gate_timeout_s=60.0, gate_timeout_policy="approve")
    policy, why = unattended_gate_policy(timed)
    assert policy == "approve" and "--gate-timeout-policy approve applies at once" in why
    no_timeout = RunOptions(op="x", gate_timeout_policy="approve")  # never times out: veto
    assert unattended_gate_policy(no_timeout)[0] == "veto"


def test_plain_resume_prints_one_line_then_only_new_events(tmp_path):
    run_dir = tmp_path / "run"
    first = _cli(
        "optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "2", "--branches", "1",
        "--gate-timeout", "600", "--gate-timeout-policy", "approve", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.count(NO_TERMINAL) == 1
    assert "--gate-timeout-policy approve applies at once" in first.stdout
    saved = _saved_options(run_dir)
    assert (saved["gate"], saved["gate_timeout_s"], saved["gate_timeout_policy"]) == (
        "ask", 600.0, "approve",
    )  # fmt: skip
    started = read_events(run_dir)[0]
    assert isinstance(started, ev.RunStarted) and started.settings["gate"] == "ask"

    second = _cli("optimize", "--resume", str(run_dir), "--max-attempts", "3", "--json")
    assert second.returncode == 0, second.stderr[-2000:]
    progress = second.stderr.splitlines()
    resumed = [line for line in progress if line.startswith("resumed ")]
    assert resumed == [
        f"resumed {run_dir}: 2 attempts so far, 2 passed, best #1 (speed not measured); "
        "now max_attempts 3"
    ], progress
    assert progress[0] == f"run dir: {run_dir}"  # then the earlier session's lines: none
    assert not any(line.startswith(("run 2", "b1 opened", "#1 ", "#2 ")) for line in progress)
    assert any(line.startswith("#3 b1 proposed: ") for line in progress), progress
    assert sum(NO_TERMINAL in line for line in progress) == 1  # said once, for this session
    assert progress[-1].startswith("finished: max-attempts")
    # the summary is the replay's, exactly as before
    replay = _cli("replay", str(run_dir), "--json")
    assert json.loads(second.stdout) == json.loads(replay.stdout)
    events = read_events(run_dir)
    reopened = _session(events, 1)[0]
    assert isinstance(reopened, ev.RunReopened) and reopened.settings == {"max_attempts": 3}
    assert _saved_options(run_dir)["gate"] == "ask"


def test_gate_ask_survives_a_session_without_a_terminal(tmp_path, risky_saved_run):
    run_dir = tmp_path / "run"
    # 1: on a terminal, the gate of attempt 1 is asked; the process is killed meanwhile
    term = Terminal(
        "optimize", "rmsnorm", "--device", "cpu", "--proposer", "replay",
        "--replay-from", str(risky_saved_run), "--max-attempts", "3", "--run-dir", str(run_dir),
    )  # fmt: skip
    try:
        term.expect("approve or veto?")
        os.killpg(term.proc.pid, signal.SIGKILL)
        term.proc.wait(timeout=30)
    finally:
        term.close()
    first = read_events(run_dir)
    raised = [e for e in first if isinstance(e, ev.GateRaised)]
    assert [(g.gate_id, g.policy) for g in raised] == [("g1", "ask")]
    assert not any(isinstance(e, ev.GateResolved | ev.RunFinished) for e in first)

    # 2: resumed without a terminal: veto for this session only, the pending g1 included
    out = _cli("optimize", "--resume", str(run_dir), "--max-attempts", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert sum(line.startswith("resumed ") for line in lines) == 1
    assert "1 attempt so far, 0 passed, no attempt passed yet; 1 gate pending" in out.stdout
    assert out.stdout.count(NO_TERMINAL) == 1 and "#1 b1 proposed" not in out.stdout
    second = _session(read_events(run_dir), 1)
    assert second[0].settings == {"max_attempts": 2}  # the gate policy is not a change
    resolved = {e.gate_id: e for e in second if isinstance(e, ev.GateResolved)}
    assert resolved["g1"].decision == "veto" and resolved["g1"].by == "policy"
    assert "earlier session" in resolved["g1"].note
    assert [(e.gate_id, e.policy) for e in second if isinstance(e, ev.GateRaised)] == [
        ("g2", "veto")
    ]
    assert _saved_options(run_dir)["gate"] == "ask"

    # 3: resumed on a terminal: asked again; the answer approves and the attempt runs
    term = Terminal("optimize", "--resume", str(run_dir), "--max-attempts", "3")
    try:
        term.expect("approve or veto?")
        term.type("a")
        assert term.finish() == 0, term.text[-3000:]
    finally:
        term.close()
    assert term.text.count("resumed ") == 1
    assert NO_TERMINAL not in term.text  # not this session's, so not on its panel either
    third = _session(read_events(run_dir), 2)
    assert [(e.gate_id, e.policy) for e in third if isinstance(e, ev.GateRaised)] == [("g3", "ask")]
    answer = next(e for e in third if isinstance(e, ev.GateResolved))
    assert (answer.gate_id, answer.decision, answer.by) == ("g3", "approve", "user")
    verdicts = [e for e in third if isinstance(e, ev.VerdictReady)]
    assert [(v.attempt, v.verdict) for v in verdicts] == [(3, "pass")]
    assert not any(isinstance(e, ev.Notice) and NO_TERMINAL in e.message for e in third)
