"""Detach and attach in real terminals (tmux): a headless `kernelladder optimize` run (the
real search proposer, the real CPU worker) in one pane; `kernelladder-tui --attach` in a
second pane pauses it, edits a hint, resumes it and detaches; the headless run goes on;
a second attach stops it; the log holds every command once."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, Terminal

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_log

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (./dev/test installs it)"),
]

REPO = ROOT


def _python(*args: str) -> str:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return f"env PYTHONPATH={shlex.quote(path)} {shlex.quote(sys.executable)} " + " ".join(
        shlex.quote(a) for a in args
    )


def _events(run_dir: Path) -> list[ev.Event]:
    if not (run_dir / "events.jsonl").exists():
        return []
    return read_log(run_dir).events


def _wait_log(run_dir: Path, predicate, what: str, timeout: float = 120.0) -> list[ev.Event]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = _events(run_dir)
        if predicate(events):
            return events
        time.sleep(0.1)
    raise AssertionError(f"the log never showed {what}")


def _count(events, kind) -> int:
    return sum(isinstance(e, kind) for e in events)


def test_attach_pause_hint_detach_then_a_second_attach_stops_the_run(tmp_path):
    run_dir = tmp_path / "run"
    headless = Terminal(
        _python(
            "-m", "kernelladder", "optimize", "rmsnorm", "--device", "cpu", "--branches", "1",
            "--max-attempts", "200", "--gate", "approve", "--run-dir", str(run_dir),
        ),
        tmp_path,
    )  # fmt: skip
    attach = [_python("-m", "kernelladder.cli.tui", "--attach", str(run_dir))]
    first = second = None
    try:
        _wait_log(run_dir, lambda es: _count(es, ev.ProposalReceived) >= 1, "a first proposal")
        first = Terminal(attach[0], tmp_path)
        first.wait_for("b1", timeout=60)
        first.keys("p")
        _wait_log(run_dir, lambda es: _count(es, ev.RunPaused) == 1, "the pause")
        first.keys("h")
        first.wait_for("Hints for every branch")
        first.keys("prefer two-pass", "C-s")
        _wait_log(run_dir, lambda es: _count(es, ev.HintEdited) == 1, "the hint")
        first.keys("p")
        _wait_log(run_dir, lambda es: _count(es, ev.RunResumed) == 1, "the resume")
        first.keys("q")
        first.wait_for("Leave the run?")
        first.keys("d")
        deadline = time.monotonic() + 30
        while first.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not first.alive()  # the attached app has quit ...
        before = _count(_events(run_dir), ev.ProposalReceived)
        # ... and the headless run goes on
        _wait_log(run_dir, lambda es: _count(es, ev.ProposalReceived) > before + 1, "new proposals")
        assert headless.alive()
        assert not any(isinstance(e, ev.StopRequested) for e in _events(run_dir))

        second = Terminal(attach[0], tmp_path)
        second.wait_for("b1", timeout=60)
        second.keys("q")
        second.wait_for("Leave the run?")
        second.keys("s")
        events = _wait_log(run_dir, lambda es: isinstance(es[-1], ev.RunFinished), "the end")
        assert events[-1].reason == ev.RULE_USER_STOP
        deadline = time.monotonic() + 60
        while headless.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not headless.alive()  # the headless process ended with its run
        for kind in (ev.RunPaused, ev.HintEdited, ev.RunResumed, ev.StopRequested):
            assert _count(events, kind) == 1, kind.__name__
        assert [e.text for e in events if isinstance(e, ev.HintEdited)] == ["prefer two-pass"]
    finally:
        for term in (first, second, headless):
            if term is not None:
                term.close()


def test_detach_starts_the_run_in_the_background_and_attaches_to_it(tmp_path):
    import asyncio

    from kernelladder.app.attach import AttachedRun
    from kernelladder.engine.run.control import read_owner

    run_dir = tmp_path / "run"
    app = Terminal(
        _python(
            "-m", "kernelladder.cli.tui", "rmsnorm", "--device", "cpu", "--branches", "1",
            "--max-attempts", "200", "--gate", "approve", "--run-dir", str(run_dir), "--detach",
        ),
        tmp_path,
    )  # fmt: skip
    try:
        app.wait_for("b1", timeout=120)
        owner = read_owner(run_dir)
        assert owner is not None and owner.pid != os.getpid()
        app.keys("q")
        app.wait_for("Leave the run?")
        app.keys("d")
        deadline = time.monotonic() + 30
        while app.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not app.alive()
        before = _count(_events(run_dir), ev.ProposalReceived)
        _wait_log(run_dir, lambda es: _count(es, ev.ProposalReceived) > before, "new proposals")
        os.kill(owner.pid, 0)  # the background run is alive without its terminal
        asyncio.run(AttachedRun(run_dir).stop())
        events = _wait_log(run_dir, lambda es: isinstance(es[-1], ev.RunFinished), "the end")
        assert events[-1].reason == ev.RULE_USER_STOP
        assert "run dir:" in (run_dir / "optimize.log").read_text()
    finally:
        app.close()
