"""The app's plumbing: errors become notices (never a traceback over the screen), the
bridge coalesces and loses nothing on either loop, themes, the CLI's one-line errors,
and the pure parts (chart drawing, formatting).

Event sources: ScriptedRun (kernelladder/app/scripted.py), a test double that plays an
exact event list; and the real engine with the engine tests' scripted runner and a held
proposer (doubles: no GPU, no model here).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import ROOT, SIZE, live_app, ready, until

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.bridge import EngineBridge
from kernelladder.app.messages import EventsArrived
from kernelladder.app.scripted import ScriptedRun, demo_script
from kernelladder.app.view import EMPTY_VIEW
from kernelladder.app.widgets.run_header import NO_GPU
from kernelladder.app.widgets.speedup_chart import chart_data, draw
from kernelladder.engine.record import events as ev


def messages(app) -> list[tuple[str, str]]:
    return [(n.severity, f"{n.title}: {n.message}") for n in app._notifications]


async def test_engine_notices_and_failures_become_notifications():
    script = [
        *demo_script(attempts=2, gate_at=None, speed=False),
        ev.Notice(level="error", message="connection to gpu-box lost; retrying"),
        ev.ProposalFailed(branch_id="b1", error="no API key: set ANTHROPIC_API_KEY"),
    ]
    app = KernelLadderApp(run=ScriptedRun(script), frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: len(app._notifications) >= 2, "two notifications", pilot=pilot)
        seen = messages(app)
        assert ("error", "notice: connection to gpu-box lost; retrying") in seen
        assert ("warning", "proposer failed on b1: no API key: set ANTHROPIC_API_KEY") in seen
        assert app.screen is app.main  # still on the main screen, no crash


class BrokenRun(ScriptedRun):
    async def run(self) -> None:
        self._publish(ev.RunStarted(run_id="x", op="rmsnorm"))
        await asyncio.sleep(0.05)
        raise RuntimeError("runner lost: ssh connection reset\nwith a second line")


async def test_a_failing_engine_is_a_notice_not_a_traceback():
    app = KernelLadderApp(run=BrokenRun([]), frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.run_over, "the engine worker ended", pilot=pilot)
        await pilot.pause(0.1)
        assert ("error", "the run failed: RuntimeError: runner lost: ssh connection reset") in (
            messages(app)
        )
        assert app.is_running and app.screen is app.main
        assert app.main.check_action("prune_branch", ()) is None  # nothing left to steer


async def test_a_batch_handled_while_the_app_closes_is_folded_not_shown():
    """Seen once in CI: a batch of events was handled while run_test's shutdown removed
    the main screen's widgets, and the app raised NoMatches. Textual's shutdown first
    marks the app as not running, then removes its widgets; that moment cannot be
    reached from outside, so the test sets Textual's own flag (`_running`) as the
    shutdown does, and checks the batch is folded and the widgets are left alone."""
    app = KernelLadderApp(run=ScriptedRun(demo_script(attempts=2, gate_at=None, speed=False)),
                          frozen=True, batch_interval=0.02)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts_judged >= 2, "verdicts", pilot=pilot)
        shown, show = [], app.main.show
        app.main.show = lambda view, **kw: shown.append(view)
        app._running = False
        try:
            late = ev.Notice(level="info", message="a line that came as the app closed")
            app.on_events_arrived(EventsArrived((late,)))
        finally:
            app._running = True
            app.main.show = show
        assert shown == []  # the widgets, being removed, are not touched
        assert late.message in [n.message for n in app.fold.state.notices]  # folded, not lost


async def test_cpu_run_says_speed_is_not_measured():
    app = KernelLadderApp(run=ScriptedRun(demo_script(speed=False)), frozen=True,
                          batch_interval=0.02)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.attempts_judged >= 8, "verdicts", pilot=pilot)
        await until(
            lambda: any(NO_GPU in row for row in app.main.screen_state()["chart"]),
            "the chart's note",
            pilot=pilot,
        )
        state = app.main.screen_state()
        assert NO_GPU in state["header"]
        assert "passes (speed not measured)" in state["header"]


async def test_engine_on_its_own_loop_in_a_thread(tmp_path):
    """The bridge's other mode (for SSH libraries that disagree with the app's task
    factory on Python 3.12): the real engine runs on its own loop; commands cross over."""
    app, run = live_app(tmp_path)
    app.bridge.own_loop = True
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        assert app.bridge._engine_loop is not asyncio.get_running_loop()
        await pilot.press("a")
        await until(lambda: app.main.view.gate("g1") is None, "gate resolved", pilot=pilot)
        await pilot.press("s", "y")
        await until(lambda: app.run_over, "run over", pilot=pilot)
    assert app.fold.folded == app.bridge.events_pumped == app.bridge.events_delivered


async def test_bridge_coalesces_and_delivers_everything():
    run = ScriptedRun(demo_script(attempts=60, progress_lines=20), hold_open=False)
    bridge = EngineBridge(run, interval=0.05)
    batches: list[tuple] = []

    def deliver(batch, finished):
        batches.append((batch, finished))
        bridge.batch_handled()

    await asyncio.gather(bridge.engine_main(), bridge.flush_loop(deliver))
    delivered = [e.seq for batch, _ in batches for e in batch]
    assert delivered == list(range(run.published))  # all, in order, once
    assert batches[-1][1] and not any(f for _, f in batches[:-1])
    assert len(batches) < run.published / 20  # coalesced


def test_themes_project_and_builtin():
    events = demo_script()
    for name in ("kernelladder-dark", "kernelladder-light", "textual-light", "nord"):
        assert KernelLadderApp(events=events, theme=name).theme == name
    with pytest.raises(ValueError, match="unknown theme 'nope'"):
        KernelLadderApp(events=events, theme="nope")


async def test_switching_theme_redraws_the_tree_in_its_colours():
    app = KernelLadderApp(events=demo_script(), frozen=True, at_end=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        tree = app.main.query_one("StrategyTree")
        dark = tree._style("pass")
        app.theme = "kernelladder-light"
        await pilot.pause(0.1)
        assert tree._style("pass") != dark


def test_chart_draws_points_best_lines_target_and_band():
    from dataclasses import replace

    from kernelladder.app.folding import build_view
    from kernelladder.engine.record.state import fold

    events = [replace(e, seq=i, ts=float(i)) for i, e in enumerate(demo_script())]
    view = build_view(fold(events))
    rows = draw(chart_data(view), 80, 12)
    text = ["".join(t for t, _ in row) for row in rows]
    assert len(rows) == 12
    assert "best 1.53× #9 (b3)" in text[0] and "of floor" in text[0] and "target 1.50×" in text[0]
    body = "\n".join(text[1:])
    assert body.count("●") >= 5 and "─" in body and "┄" in body and "░" in body
    keys = {k for row in rows for _, k in row}
    assert {"branch-0", "branch-1", "branch-2", "target", "band", "axis"} <= keys
    empty = draw(chart_data(EMPTY_VIEW), 80, 12)
    assert len(empty) == 12 and any(k == "note" for row in empty for _, k in row)


def test_cli_errors_are_one_line():
    def tui(*args):
        return subprocess.run([sys.executable, "-m", "kernelladder.cli.tui", *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    for args, wanted in (
        (["--replay", "/nonexistent-run"], "holds no run"),
        (["--replay", "x", "rmsnorm"], "give no op"),
        (["--speed", "-2", "--replay", "x"], "must be above 0"),
        ([], "give an op"),
    ):
        out = tui(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert wanted in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_gate_countdown_when_a_timeout_policy_applies():
    from kernelladder.app.view import GateView
    from kernelladder.app.widgets.gates_panel import countdown

    gate = GateView("g1", "b1", 3, "two-pass", "high", "family change", "ask", 60.0, 1000.0)
    assert countdown(gate, 1018.2, "veto") == "veto in 42s"
    assert countdown(gate, 2000.0, "veto") == "veto in 0s"
    assert countdown(
        GateView("g2", "b1", 4, "m", "high", "r", "approve", 10.0, 0.0), 4, "veto"
    ) == ("approve in 6s")
    assert countdown(GateView("g3", "b1", 5, "m", "high", "r", "ask", None, 0.0), 9, "veto") == (
        "waits for you"
    )


async def test_gate_countdown_ticks_in_the_gates_panel():
    script = demo_script(gate_at=2, attempts=3)
    script = [
        ev.GateRaised(**{**e.__dict__, "timeout_s": 30.0}) if isinstance(e, ev.GateRaised) else e
        for e in script
    ]
    clock = [0.0]
    app = KernelLadderApp(run=ScriptedRun(script, clock=lambda: clock[0]), frozen=True,
                          clock=lambda: clock[0], batch_interval=0.02)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.gates, "the gate", pilot=pilot)
        table = app.main.query_one("GatesPanel")._table
        assert str(table.get_cell("g1", "countdown")) == "veto in 30s"
        clock[0] = 12.0
        await pilot.pause(1.2)  # the panel ticks once a second
        assert str(table.get_cell("g1", "countdown")) == "veto in 18s"


def test_headless_replay_prints_the_run():

    example = ROOT / "examples" / "cpu-rmsnorm-run"
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder.cli.tui", "--headless", "--replay", str(example)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "rmsnorm" in out.stdout and "b3 opened: persistent" in out.stdout
    assert "finished: max-attempts" in out.stdout
