"""Detach and attach: a run serves steering commands on its control channel (a real Unix
socket); attached apps tail its log and steer through it, each command applied once and
recorded once; quitting an attached app can leave the run running.

The owning run is the real engine. Its runner and proposer are the engine tests' doubles
(this machine has no GPU and no model): the proposer hands out one scripted move per
branch and then waits, so the run stays live while the tests steer it. The tmux test in
test_tui_attach_tmux.py drives the real CPU run in a real terminal.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import ScriptedRunner, move, scripted_op, until

from kernelladder.app import view as v
from kernelladder.app.app import KernelLadderApp
from kernelladder.app.attach import AttachedRun, AttachError
from kernelladder.app.modals.leave_run import LeaveRunScreen
from kernelladder.engine import create_run, resume_run
from kernelladder.engine.protocols import ProposerBase
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.run.control import OWNER_FILE, live_owner, read_owner
from kernelladder.engine.run.options import RunOptions

SIZE = (150, 44)


class TwoMovesProposer(ProposerBase):
    """Proposer double (no model here): two scripted moves, then it waits (cancellable)."""

    name = "scripted"

    def __init__(self) -> None:
        self.count = 0

    def strategies(self, op, k: int) -> list[str]:
        return ["alpha", "beta"][:k]

    async def propose(self, ctx):
        self.count += 1
        if self.count > 2:
            await asyncio.Event().wait()
        p = move("pass 1.2", f"step {self.count}")
        return p.__class__(**{**p.__dict__, "source": p.source + f"# n{self.count}\n"})


def owned_run(tmp_path):
    opts = RunOptions(
        op="scripted", proposer="scripted", run_dir=str(tmp_path / "run"), branches=2,
        gate="ask", device="cuda",
    )  # fmt: skip
    return create_run(opts, runner=ScriptedRunner(), proposer=TwoMovesProposer(), op=scripted_op())


async def started(run) -> asyncio.Future:
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.started and read_owner(run.run_dir) is not None, what="owner.json")
    return task


def of_kind(run_dir, kind) -> list[ev.Event]:
    return [e for e in read_events(run_dir) if isinstance(e, kind)]


async def test_two_attached_apps_see_every_event_and_each_command_applies_once(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    owner = live_owner(run.run_dir)
    assert owner.pid > 0 and owner.control
    first, second = AttachedRun(run.run_dir, poll_s=0.02), AttachedRun(run.run_dir, poll_s=0.02)
    tails = [asyncio.ensure_future(a.run()) for a in (first, second)]
    await first.pause()
    with pytest.raises(ValueError, match="already paused"):
        await second.pause()  # the engine's one-line refusal, over the channel
    await second.edit_hints("prefer two-pass")
    await first.resume()
    await second.pause("b1")
    with pytest.raises(ValueError, match="no pending gate g7"):
        await first.approve("g7")
    await first.stop()
    await asyncio.wait_for(task, 10)
    # a tail goes on past the run's end (a resume may follow): leaving ends it
    await until(lambda: first.finished_seen and second.finished_seen, what="both at the end")
    for tail in tails:
        tail.cancel()
    await asyncio.gather(*tails, return_exceptions=True)
    seen = [[e async for e in a.subscribe()] for a in (first, second)]
    logged = read_events(run.run_dir)
    assert seen[0] == seen[1] == logged  # both saw every event, in order
    assert [len(of_kind(run.run_dir, k)) for k in (ev.RunPaused, ev.RunResumed)] == [1, 1]
    assert [e.text for e in of_kind(run.run_dir, ev.HintEdited)] == ["prefer two-pass"]
    assert [e.branch_id for e in of_kind(run.run_dir, ev.BranchPaused)] == ["b1"]
    assert len(of_kind(run.run_dir, ev.StopRequested)) == 1
    assert isinstance(logged[-1], ev.RunFinished)
    assert not (run.run_dir / OWNER_FILE).exists()  # a finished run has no owner


async def test_attaching_to_a_finished_or_missing_run_says_why(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    await run.stop()
    await asyncio.wait_for(task, 10)
    with pytest.raises(AttachError, match="is not running"):
        AttachedRun(run.run_dir)
    with pytest.raises(AttachError, match="holds no run"):
        AttachedRun(tmp_path)


def test_tui_attach_to_a_run_that_is_not_running_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder.cli.tui", "--attach", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"kernelladder-tui: error: {tmp_path} holds no run (no events.jsonl)"
    ]
    both = subprocess.run(
        [sys.executable, "-m", "kernelladder.cli.tui", "rmsnorm", "--attach", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert both.returncode == 2 and "give no op" in both.stderr


async def test_quit_dialog_detach_leaves_the_run_running(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await pilot.press("q")
        await pilot.pause(0.1)
        assert isinstance(app.screen, LeaveRunScreen)
        await pilot.press("d")
        await pilot.pause(0.1)
    assert app.detached
    await asyncio.sleep(0.3)
    assert not task.done() and not run.state.stopping  # the run goes on
    assert not of_kind(run.run_dir, ev.StopRequested)
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_quit_dialog_stop_and_quit_stops_the_run_once(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await pilot.press("q")
        await pilot.pause(0.1)
        assert isinstance(app.screen, LeaveRunScreen)
        await pilot.press("s")
        await asyncio.wait_for(task, 10)
        await until(lambda: not app.is_running, what="the app to exit")
    assert not app.detached
    stops = of_kind(run.run_dir, ev.StopRequested)
    assert len(stops) == 1 and stops[0].by == "user"
    assert run.state.finished


async def test_quit_dialog_escape_keeps_watching(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await pilot.press("q")
        await pilot.pause(0.1)
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, LeaveRunScreen) and app.is_running
        await pilot.press("p")  # steering still goes through the channel
        await until(lambda: of_kind(run.run_dir, ev.RunPaused), what="RunPaused")
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_a_run_that_cannot_serve_its_channel_goes_on_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent-runtime-dir")  # short: no fallback
    run = owned_run(tmp_path)
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.state.attempts_used >= 2, what="two attempts")
    notices = [e.message for e in of_kind(run.run_dir, ev.Notice)]
    assert any(m.startswith("attach is off for this run: ") for m in notices), notices
    assert read_owner(run.run_dir) is None
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_ctrl_c_asks_as_q_does_and_the_dialog_names_the_run_directory(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await pilot.press("ctrl+c")
        await pilot.pause(0.1)
        assert isinstance(app.screen, LeaveRunScreen)
        text = " ".join(str(label.render()) for label in app.screen.query("Label"))
        assert f"kernelladder-tui --attach {run.run_dir}" in " ".join(text.split()), text
        assert "RUN_DIR" not in text
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.is_running and not isinstance(app.screen, LeaveRunScreen)
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_the_header_says_the_app_is_attached_to_another_process(tmp_path):
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await pilot.pause(0.1)
        first = app.main.screen_state()["header"].splitlines()[0]
        owner = read_owner(run.run_dir)
        assert f"attached to pid {owner.pid} on {owner.host}" in first, first
        assert len(first) <= 78
        await run.stop()  # the owner ends: nothing is attached any more
        await asyncio.wait_for(task, 10)
        await until(lambda: app.main.view.state == "finished", what="the end on screen")
        await pilot.pause(0.1)
        assert "attached to" not in app.main.screen_state()["header"]


async def test_an_attached_app_follows_the_newest_session_of_a_resumed_run(tmp_path):
    # a log may hold several sessions: stopped, then resumed (here in this process, the
    # engine's doubles again); the app shows the new session and steers its owner
    run = owned_run(tmp_path)
    task = await started(run)
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts, what="attempts on screen")
        await run.stop()
        await asyncio.wait_for(task, 10)
        await until(lambda: app.main.view.state == v.RUN_FINISHED, what="the first end")
        assert "attached to" not in app.main.screen_state()["header"]
        again = resume_run(run.run_dir, runner=ScriptedRunner(), proposer=TwoMovesProposer())
        second = await started(again)
        await until(lambda: app.main.view.state == v.RUN_RUNNING, what="the new session")
        owner = read_owner(run.run_dir)
        await until(
            lambda: f"attached to pid {owner.pid}" in app.main.screen_state()["header"],
            what="the new owner in the header",
            pilot=pilot,
        )
        await pilot.press("p")  # steers the new session's process
        await until(lambda: of_kind(run.run_dir, ev.RunPaused), what="RunPaused")
        reopened = of_kind(run.run_dir, ev.RunReopened)[0].seq
        assert of_kind(run.run_dir, ev.RunPaused)[0].seq > reopened
        await until(lambda: app.main.view.state == v.RUN_PAUSED, what="paused on screen")
        await pilot.press("q")  # a live session again: quitting asks
        await pilot.pause(0.1)
        assert isinstance(app.screen, LeaveRunScreen)
        await pilot.press("d")
    await again.stop()
    await asyncio.wait_for(second, 10)
