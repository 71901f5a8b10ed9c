"""A first-time user's audit of `kernelladder-tui` on small and large terminals: what was
cut off, hidden or unreadable at 80x24, and that it now shows.

Fed from the committed example runs (real runs: a CPU run of rmsnorm, an H200 search of
rmsnorm) in replay mode, so every clock on screen is the log's own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import H100_RUNS, H200_RUNS, ROOT, replay_app, settled_footer, until
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.widgets import Button, Label, Static

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.folding import ReplayTimeline
from kernelladder.app.modals.confirm import ConfirmScreen
from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.modals.help_screen import HelpScreen
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.modals.input_prompt import InputPrompt
from kernelladder.app.modals.trust_host_key import TrustHostKeyScreen
from kernelladder.app.replay import load_events
from kernelladder.app.screenshots import gate_position, settle
from kernelladder.app.scripted import ScriptedRun, demo_script
from kernelladder.app.widgets.attempt_log import AttemptLog
from kernelladder.app.widgets.gates_panel import GatesPanel
from kernelladder.app.widgets.run_header import NO_GPU, RunHeader, status_line
from kernelladder.app.widgets.speedup_chart import SpeedupChart
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.app.widgets.verdict_view import VerdictView, render_speed
from kernelladder.engine.record import events as ev
from kernelladder.verifier.contract.verdict import Verdict

EXAMPLES = ROOT / "examples"
CPU_RUN = EXAMPLES / "cpu-rmsnorm-run"  # speed not measured
H200_RUN = H200_RUNS / "rmsnorm-search"  # speeds, the speed gate's rounds
SMALL, LARGE = (80, 24), (200, 50)


def replay_view(run_dir: Path):
    """The view at the end of a saved run, folded as the app folds it."""
    events = load_events(run_dir)
    return ReplayTimeline(events).view_at(len(events))


def modal_screens(app: KernelLadderApp) -> dict[str, object]:
    gate = app.main.view.gates[0]
    return {
        "confirm": ConfirmScreen(
            "Stop the run and quit?",
            "The run is still going. Quitting stops it: in-flight attempts finish and are "
            "recorded, and the log is complete either way.",
            yes="Stop and quit",
            no="Keep watching",
        ),
        "input": InputPrompt(
            "Change the target speedup",
            "A speedup over the reference, e.g. 1.5; empty or 'none' for no target.",
        ),
        "gate": GatePrompt(gate, now=lambda: gate.raised_ts),
        "hints": HintsEditor("global", "prefer wide rows"),
        "trust": TrustHostKeyScreen("gpu-box", 22, "SHA256:" + "A" * 43, "/tmp/known_hosts"),
        "help": HelpScreen([], "Every action is also in the command palette (ctrl+p). " * 3),
    }


@pytest.mark.parametrize("size", [SMALL, LARGE, (60, 20), (40, 12)])
async def test_every_dialog_fits_the_terminal_and_wraps_its_text(size):
    """Before: a dialog's text was one Label of its own width, cut at the border (the quit
    question lost 'attempts finish and are recorded...'), and dialogs wider than 80
    columns (gate 84, hints 90, trust 96, help 110) ran off the screen with their
    Approve / Apply / Trust buttons; at 60x20 and 40x12 the gate prompt's buttons and
    keys were below the screen's edge (tab landed on buttons no one could see)."""
    app = replay_app(CPU_RUN)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        app.replay_seek(gate_position(app.player.timeline.events))
        await settle(app, pilot)
        screen_box = Region(0, 0, *size)
        for name, screen in modal_screens(app).items():
            app.push_screen(screen)
            await settle(app, pilot)
            dialog = app.screen.children[0]  # the dialog box (the help's one scrolls)
            assert screen_box.contains_region(dialog.region), (name, dialog.region)
            inside = dialog.content_region
            scrolls = isinstance(dialog, VerticalScroll)  # the help: its whole text scrolls
            for widget in [] if scrolls else app.screen.query(Label).results():
                if not widget.display:  # left out on a short terminal (the hints' help)
                    continue
                body = next((a for a in widget.ancestors if a.has_class("dialog-body")), None)
                if body is not None:  # a long text scrolls inside its part of the dialog
                    assert inside.contains_region(body.region), (name, body.region)
                    continue
                assert inside.contains_region(widget.region), (name, str(widget.render()))
            for button in app.screen.query(Button).results():
                assert inside.contains_region(button.region), (name, str(button.label))
            if name == "confirm":  # the long body wraps onto more lines
                body = app.screen.query(Label)[1]
                assert body.size.height >= 2
            app.pop_screen()
            await settle(app, pilot)


async def test_a_replay_footer_shows_its_play_step_keys_first():
    """Before: the footer showed one binding per key in BINDINGS order, so in a replay `p`
    read 'Pause' (the run's pause, disabled) instead of 'Play', and the replay keys came
    after eleven disabled steering keys: off the footer even at 120 columns."""
    app = replay_app(H200_RUN)
    async with app.run_test(size=SMALL) as pilot:
        keys = await settled_footer(pilot, app)
        assert keys["p"][:2] == ("Play", True)
        visible = Region(0, 0, *SMALL)
        for key, what in (("p", "Play"), ("comma", "Back"), ("full_stop", "Step"), ("end", "End")):
            description, enabled, region = keys[key]
            assert (description, enabled) == (what, True)
            assert visible.contains_region(region), (what, region)
        # steering does not apply in a replay: what is shown of it is disabled, and at 80
        # columns it is what the footer leaves out first (the help screen lists it)
        steering = {"x", "h", "H", "a", "v", "b", "o", "t", "s"}
        assert all(not keys[k][1] for k in steering & set(keys))
        assert "x" not in keys
        at = app.player.position
        await pilot.press("p")  # the key the footer names plays the replay
        await pilot.pause(0.3)
        assert app.player.playing or app.player.position != at


async def test_a_live_footer_keeps_pause_on_p():
    app = KernelLadderApp(run=ScriptedRun(demo_script(attempts=2)), frozen=True,
                          batch_interval=0.02)  # fmt: skip
    async with app.run_test(size=SMALL) as pilot:
        await until(lambda: app.main.view.attempts_judged >= 2, "verdicts", pilot=pilot)
        keys = await settled_footer(pilot, app)
        assert keys["p"][:2] == ("Pause", True)
        assert not {"comma", "full_stop", "end"} & set(keys)  # no replay keys in a live run


@pytest.mark.parametrize(
    ("run_dir", "state"),
    [(CPU_RUN, "finished: max-attempts"), (H200_RUN, "finished: all-branches-done")],
)
async def test_the_header_keeps_the_run_state_and_attempts_at_80_columns(run_dir, state):
    """Before: each header line was one Content in a 2-line widget, wrapped at the width;
    on a CPU run at 80 columns the first line took both rows and the status line
    (attempts, best, the run's state) was not shown at all, and on the H200 run the
    state was cut off."""
    app = replay_app(run_dir)
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        header = app.main.query_one(RunHeader)
        lines = header.render().plain.split("\n")
        assert len(lines) == 2
        assert all(len(line) <= header.size.width for line in lines), lines
        assert "attempts " in lines[1] and "best #" in lines[1], lines
        assert lines[1].endswith(state), lines
        assert "target none" in lines[0], lines
        if run_dir == CPU_RUN:
            assert NO_GPU in lines[0]


def test_a_status_line_leaves_out_floor_cost_then_elapsed_never_the_state():
    view = replay_view(H200_RUN)
    wide = status_line(view, 86.0).plain
    assert "elapsed 01:26" in wide and "of floor" in wide and "cost $0.00" in wide
    assert status_line(view, 86.0, len(wide)).plain == wide
    shorter = status_line(view, 86.0, 105).plain
    assert "of floor" not in shorter and "cost" not in shorter and "elapsed 01:26" in shorter
    narrow = status_line(view, 86.0, 80).plain
    assert narrow == "attempts 27/40  best #5 8.22× over reference  finished: all-branches-done"
    tiny = status_line(view, 86.0, 30).plain
    assert tiny.endswith("finished: all-branches-done") and len(tiny) <= 30


@pytest.mark.parametrize("size", [SMALL, (120, 40), LARGE])
async def test_the_selected_attempt_keeps_rows_on_a_short_terminal(size):
    """Before: the speedup chart was 12 rows at any height, so at 80x24 the selected
    attempt's log or verdict got 3 rows; and the strategy graph kept 44 of 80 columns."""
    app = replay_app(H200_RUN)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        chart = app.main.query_one(SpeedupChart)
        log = app.main.query_one(AttemptLog)
        assert log.region.height >= 6, log.region
        rows = ["".join(text for text, _ in row) for row in chart._layout(chart.size)]
        assert any("●" in row for row in rows)  # the chart still draws the attempts
        assert chart.outer_size.height == (12 if size != SMALL else 7)
        assert app.main.query_one("#right").region.width >= 44


def drawn_rows(widget) -> list[str]:
    """The rows a widget draws, as text (what the screen shows of it, unscrolled)."""
    width, height = widget.size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


STANDINGS = (  # best #5 of the H200 rmsnorm search, as `kernelladder replay` prints them
    ("32768x8192 bf16", "0.98× slower (torch.compile, lost 7/7 rounds)"),
    ("4096x4096 bf16", "1.15× faster (torch.compile)"),
    ("tiny 1x1000 fp32", "1.00× tie (torch.compile, won 4/7 rounds)"),
)


@pytest.mark.parametrize("size", [SMALL, (120, 40), LARGE])
async def test_the_verdict_tab_shows_each_shapes_rounds_on_whole_rows(size):
    """Before: the timings were lines of the wrapping verdict text, wider than the panel
    at every size, so "(torch.compile, lost 7/7 rounds)" broke onto the next row under the
    shape column, even at 200 columns."""
    app = replay_app(H200_RUN)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        app.main.query_one(StrategyTree).select_attempt(5)
        await pilot.press("2")
        await settle(app, pilot)
        view = app.main.query_one(VerdictView)
        rows = [row for static in view.query(Static).results() for row in drawn_rows(static)]
        for shape, standing in STANDINGS:
            at = [i for i, row in enumerate(rows) if standing in row]
            assert at, (standing, rows)
            row = rows[at[0]]
            assert shape in row or (shape in rows[at[0] - 1] and "↳" in row), (shape, row)
        if size != SMALL:  # the whole block fits: nothing to scroll sideways for
            block = view.query_one("#verdict-speed", Static)
            assert block.outer_size.width <= view.scrollable_content_region.width


def test_the_speed_block_puts_the_standing_under_its_shape_when_narrow():
    verdict = Verdict.from_dict(json.loads((H200_RUN / "attempts" / "5.json").read_text()))
    wide = render_speed(verdict).plain.splitlines()
    assert any(
        line.startswith("  32768x8192 bf16") and line.endswith("lost 7/7 rounds)") for line in wide
    )
    narrow = render_speed(verdict, 66).plain.splitlines()
    assert all(len(line) <= 66 for line in narrow), narrow
    i = next(i for i, line in enumerate(narrow) if line.startswith("  32768x8192 bf16"))
    assert narrow[i + 1] == "    ↳ 0.98× slower (torch.compile, lost 7/7 rounds)"
    assert "1.68× vs F.rms_norm" in render_speed(verdict, 66).plain  # each baseline still
    assert render_speed(replace(verdict, speedup=None), 66) is None  # said in the prose


async def test_a_gates_countdown_is_on_screen_at_80_columns():
    """Before: the countdown ('veto in 30s') was the last column, after the move and its
    reason, off the panel's right edge at 80 and at 120 columns: a gate decided itself
    with no visible warning."""
    script = [  # the demo script's gate, given a 30 s timeout
        ev.GateRaised(**{**e.__dict__, "timeout_s": 30.0}) if isinstance(e, ev.GateRaised) else e
        for e in demo_script(gate_at=2, attempts=3)
    ]
    app = KernelLadderApp(run=ScriptedRun(script, clock=lambda: 0.0), frozen=True,
                          clock=lambda: 0.0, batch_interval=0.02)  # fmt: skip
    async with app.run_test(size=SMALL) as pilot:
        await until(lambda: app.main.view.gates, "the gate", pilot=pilot)
        await settle(app, pilot)
        table = app.main.query_one(GatesPanel)._table
        keys = [column.key.value for column in table.ordered_columns]
        left = sum(
            table.columns[k].get_render_width(table) for k in keys[: keys.index("countdown")]
        )
        right = left + table.columns["countdown"].get_render_width(table)
        assert right <= table.scrollable_content_region.width, (keys, right)
        assert str(table.get_cell("g1", "countdown")) == "veto in 30s"


async def test_the_replays_last_attempt_is_in_view_at_80x24():
    """`--replay RUN --end` on an 80x24 terminal selects the run's last attempt; when it is
    the last line of a branch far down the tree (tests/data/h100-runs/rmsnorm-search: #27, the
    last line of b3) the tree must scroll to it. Before, its scroll was clamped to the
    height the tree had before that branch's lines were laid out: the tree stopped
    partway, the cursor below the pane."""
    app = replay_app(H100_RUNS / "rmsnorm-search")
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        tree = app.main.query_one(StrategyTree)
        await until(lambda: tree.cursor_node is not None, "a selected attempt", pilot=pilot)
        await pilot.pause(0.1)
        node = tree.cursor_node
        assert node.data.attempt == max(app.main.view.attempts)
        line = node.line
        top = tree.scroll_offset.y
        assert top <= line < top + tree.scrollable_content_region.height, (line, top)


async def test_at_40x12_the_footer_keeps_help_and_quit(tmp_path):
    """Before: Target, Stop, Export, Help and Quit were never left out, so at 40 columns
    the docked `^p Commands` key was drawn over `q Quit`."""
    from helpers import live_app, ready

    app, run = live_app(tmp_path)  # a live run: every steering key acts
    async with app.run_test(size=(40, 12)) as pilot:
        await ready(pilot, app, run)
        keys = await settled_footer(pilot, app)
        for key in ("q", "question_mark"):
            assert key in keys and Region(0, 0, 40, 12).contains_region(keys[key][2]), keys
            others = [region for k, (_, _, region) in keys.items() if k != key]
            assert not any(keys[key][2].overlaps(r) for r in others), keys  # ^p drew over q


async def test_at_60x20_the_attempt_pane_keeps_more_than_the_graph():
    """Before: the graph kept 36 columns and left the selected attempt 24."""
    app = replay_app(CPU_RUN)
    async with app.run_test(size=(60, 20)) as pilot:
        await settle(app, pilot)
        left = app.main.query_one("#left").size.width
        right = app.main.query_one("#right").size.width
        assert right >= 30 and left < right, (left, right)


async def test_at_80x24_the_graph_keeps_the_lineage_of_a_move():
    """Before: the line was cut at the pane's edge: `ROWS 4->8 (from #1…`, losing which
    attempt the move was made from; the lineage now comes before the move."""
    app = replay_app(H100_RUNS / "softmax-search")
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        tree = app.main.query_one(StrategyTree)
        width = tree.scrollable_content_region.width - tree.guide_depth
        lines = [line for line in app.main.screen_state()["tree"] if "from #" in line]
        assert lines
        for line in lines:
            assert line.strip().index("from #") + len("from #NN") <= width, line
