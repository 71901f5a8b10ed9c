"""How the app looks, fed from the committed example run (examples/cpu-rmsnorm-run: a
real CPU run of rmsnorm, steered through the app; see examples/make_cpu_rmsnorm_run.py).

Replay mode, so every clock on screen is the log's own and the pictures are stable;
cursor blink is off (`frozen`). The SVGs live in tests/app/__snapshots__/; update them on
purpose only:  pytest tests/app/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from helpers import ROOT

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.replay import load_events
from kernelladder.app.screenshots import SIZE, gate_position, settle

EXAMPLE = ROOT / "examples" / "cpu-rmsnorm-run"


def example_app(**kwargs) -> KernelLadderApp:
    return KernelLadderApp(events=load_events(EXAMPLE), run_dir=EXAMPLE, frozen=True,
                           at_end=True, **kwargs)  # fmt: skip


def test_main_screen(snap_compare):
    app = example_app()

    async def ready(pilot):
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_main_screen_light_theme_verdict_tab(snap_compare):
    app = example_app(theme="kernelladder-light")

    async def ready(pilot):
        await settle(app, pilot)
        await pilot.press("2")
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_gate_prompt(snap_compare):
    app = example_app()

    async def ready(pilot):
        await settle(app, pilot)
        app.replay_seek(gate_position(app.player.timeline.events))
        await settle(app, pilot)
        gate = app.main.view.gates[0]
        app.push_screen(GatePrompt(gate, now=lambda: gate.raised_ts))
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_hints_editor(snap_compare):
    app = example_app()

    async def ready(pilot):
        await settle(app, pilot)
        view = app.main.view
        app.push_screen(
            HintsEditor(
                "global", "prefer two-pass\nfix EPT=8\nmind the tail rows",
                op=view.op, proposer=view.proposer,
            )
        )  # fmt: skip
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_help_screen(snap_compare):
    app = example_app()

    async def ready(pilot):
        await settle(app, pilot)
        await pilot.press("question_mark")
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_speedup_chart_with_speeds(snap_compare):
    """The chart with points, best-so-far lines, target and noise band. This machine has
    no GPU, so the speedups here are scripted test data (demo_script, "scripted GPU"),
    not measurements; the H200 example run under examples/ shows real ones."""
    from dataclasses import replace

    from kernelladder.app.scripted import demo_script

    events = [replace(e, seq=i, ts=1_700_000_000.0 + i) for i, e in enumerate(demo_script())]
    app = KernelLadderApp(events=events, frozen=True, at_end=True)

    async def ready(pilot):
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
