"""Steering keys that do what the person meant: the gate prompt never approves by
accident, follow keeps the newest attempt, a resumed run shows its folded state from the
first frame, every key stays reachable at 80x24, and a finished run says which keys no
longer apply.

The engine is the real one (kernelladder.engine.Run) with the steering tests'
doubles for what this machine lacks: ScriptedRunner (no GPU: verdicts read from a marker
line in the candidate) and HeldProposer (no model: scripted moves, then it waits).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers import (
    H200_RUN,
    HeldProposer,
    ScriptedRunner,
    SlowStartRunner,
    live_app,
    logged,
    move,
    ready,
    replay_app,
    scripted_op,
    settled_footer,
    tree_text,
    until,
)
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.widgets import Input, Label
from textual.widgets._toast import Toast, ToastRack

from kernelladder.app.app import KernelLadderApp, MainScreen
from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.modals.help_screen import HelpScreen, key_label
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.modals.input_prompt import InputPrompt
from kernelladder.app.screenshots import settle
from kernelladder.app.widgets.gates_panel import GatesPanel
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.engine import create_run, resume_run
from kernelladder.engine.protocols import Proposal, ProposerBase
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.record.summary import summarize
from kernelladder.engine.run.options import RunOptions

SIZE = (150, 44)
SMALL = (80, 24)


# --- the gate prompt -------------------------------------------------------------------


async def open_gate_prompt(pilot, app, run) -> GatePrompt:
    await ready(pilot, app, run)
    await pilot.press("g")
    await until(lambda: isinstance(app.screen, GatePrompt), "the gate prompt", pilot=pilot)
    return app.screen


async def test_gate_prompt_starts_in_the_note_field(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        prompt = await open_gate_prompt(pilot, app, run)
        assert app.focused is prompt.query_one("#gate-note", Input)
        keys = str(prompt.query_one("#gate-keys", Label).render())
        assert "enter: veto with this note" in keys and "ctrl+a: approve" in keys


async def test_enter_in_the_gate_note_vetoes_with_the_note(tmp_path):
    """Before: Approve had the focus, so typing a veto note and pressing enter recorded
    decision 'approve' with no note."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_gate_prompt(pilot, app, run)
        await pilot.press(*"keep one pass", "enter")
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)
        assert [(r.gate_id, r.decision, r.note, r.by) for r in resolved] == [
            ("g1", "veto", "keep one pass", "user")
        ]
        assert not isinstance(app.screen, GatePrompt)


async def test_enter_with_an_empty_gate_note_decides_nothing(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        prompt = await open_gate_prompt(pilot, app, run)
        await pilot.press("enter")
        await pilot.press(*"   ", "enter")  # blanks are no note either
        await pilot.pause(0.2)
        assert app.screen is prompt  # still asking
        assert not logged(run, ev.GateResolved) and not app.commands_sent
        keys = str(prompt.query_one("#gate-keys", Label).render())
        assert keys.startswith("Type a note first to veto with enter")
        assert app.main.view.gate("g1") is not None  # the gate still waits


async def test_ctrl_a_approves_from_the_gate_prompt_without_a_note(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_gate_prompt(pilot, app, run)
        await pilot.press(*"draft", "ctrl+a")  # a note is for a veto: approving drops it
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)
        assert [(r.gate_id, r.decision, r.note) for r in resolved] == [("g1", "approve", "")]


async def test_ctrl_v_vetoes_from_the_gate_prompt_without_a_note(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_gate_prompt(pilot, app, run)
        await pilot.press("ctrl+v")
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)
        assert [(r.gate_id, r.decision, r.note) for r in resolved] == [("g1", "veto", "")]


async def test_escape_leaves_the_gate_waiting(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_gate_prompt(pilot, app, run)
        await pilot.press(*"maybe", "escape")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, GatePrompt)
        assert not logged(run, ev.GateResolved)
        assert app.main.view.gate("g1") is not None


# --- follow ----------------------------------------------------------------------------


class ReleasedProposer(ProposerBase):
    """Proposer double: each branch waits until the test releases its next move, so new
    attempts arrive one at a time while the app is watched."""

    name = "scripted"

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[Proposal]] = {}
        self.count = 0

    def strategies(self, op, k: int) -> list[str]:
        return ["alpha", "beta", "gamma"][:k]

    def queue(self, branch_id: str) -> asyncio.Queue[Proposal]:
        return self.queues.setdefault(branch_id, asyncio.Queue())

    def release(self, branch_id: str, proposal: Proposal) -> None:
        self.queue(branch_id).put_nowait(proposal)

    async def propose(self, ctx) -> Proposal:
        p = await self.queue(ctx.branch_id).get()
        self.count += 1
        return Proposal(**{**p.__dict__, "source": p.source + f"# n{self.count}\n"})


def released_app(tmp_path: Path) -> tuple[KernelLadderApp, object, ReleasedProposer]:
    proposer = ReleasedProposer()
    options = RunOptions(
        op="scripted", proposer="scripted", branches=2, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=40, stagnation=40,
    )  # fmt: skip
    run = create_run(options, runner=ScriptedRunner(device="cuda"), proposer=proposer,
                     op=scripted_op())  # fmt: skip
    return KernelLadderApp(run=run, frozen=True, batch_interval=0.02), run, proposer


async def arrive(pilot, app, proposer, branch_id: str, n: int) -> None:
    """Branch `branch_id` proposes a move; wait until attempt #n is judged on screen."""
    proposer.release(branch_id, move("pass 1.1", f"step {n}"))
    await until(lambda: n in app.main.view.attempts, f"#{n} on screen", pilot=pilot)
    await until(
        lambda: app.main.view.attempts[n].state == "judged", f"#{n} judged", timeout=15, pilot=pilot
    )
    await pilot.pause(0.1)


async def test_follow_keeps_the_newest_attempt_selected_across_branches(tmp_path):
    """Before: `f` jumped to the newest attempt once, then the detail pane stayed on it
    while newer attempts ran, in the same branch and in others."""
    app, run, proposer = released_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await arrive(pilot, app, proposer, "b1", 1)
        tree = app.main.query_one(StrategyTree)
        await pilot.press("up")  # the person moves: following stops
        assert tree.follow is False
        await pilot.press("f")
        await until(lambda: app.main.selected_attempt == 1, "#1 selected by f", pilot=pilot)
        for n, branch in enumerate(["b1", "b1", "b2", "b1", "b2", "b2"], start=2):
            await arrive(pilot, app, proposer, branch, n)
            await until(lambda n=n: app.main.selected_attempt == n, f"#{n} followed", pilot=pilot)
            title = str(app.main.query_one("#attempt-title", Label).render())
            assert title.startswith(f"attempt #{n} · branch {branch}"), title
        assert tree.follow is True


async def test_moving_the_cursor_stops_following(tmp_path):
    app, run, proposer = released_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await arrive(pilot, app, proposer, "b1", 1)
        await arrive(pilot, app, proposer, "b2", 2)
        assert app.main.selected_attempt == 2  # a new run follows from the start
        await pilot.press("up", "up")  # past b2's own row to b1's #1
        await until(lambda: app.main.selected_attempt == 1, "the cursor on #1", pilot=pilot)
        held = (app.main.selected_branch, app.main.selected_attempt)
        await arrive(pilot, app, proposer, "b1", 3)
        await arrive(pilot, app, proposer, "b2", 4)
        assert (app.main.selected_branch, app.main.selected_attempt) == held
        await pilot.press("f")  # and f follows again
        await until(lambda: app.main.selected_attempt == 4, "#4 selected by f", pilot=pilot)
        await arrive(pilot, app, proposer, "b1", 5)
        await until(lambda: app.main.selected_attempt == 5, "#5 followed", pilot=pilot)


# --- a resumed run's first frame -------------------------------------------------------


async def a_run_that_finished(tmp_path: Path) -> Path:
    """Session one, headless: b1 passes #1, the person vetoes gate g1 (#2, a high
    undo-cost move), #3 passes and the run ends at its budget: finished: max-attempts."""
    proposer = HeldProposer(
        {
            "b1": [
                move("pass 1.2", "BLOCK 256"),
                move("pass 1.4", "two-pass", undo="high"),
                move("pass 1.3", "BLOCK 512"),
            ]
        }
    )
    options = RunOptions(
        op="scripted", proposer="scripted", branches=1, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=3, stagnation=20,
    )  # fmt: skip
    run = create_run(options, runner=ScriptedRunner(device="cuda"), proposer=proposer,
                     op=scripted_op())  # fmt: skip
    task = asyncio.ensure_future(run.run())
    for _ in range(1000):
        if "g1" in run.state.gates:
            break
        await asyncio.sleep(0.01)
    await run.veto("g1", "keep one pass")
    state = await asyncio.wait_for(task, 30)
    assert (state.finish_reason, state.attempts_used) == ("max-attempts", 3)
    return Path(run.run_dir)


async def test_a_resumed_run_shows_its_folded_state_from_the_first_frame(tmp_path):
    """Before: the app folded the earlier session's events as they streamed in, so for
    the seconds a verifier worker takes to start it announced 'gate g1 waits for you'
    for a gate vetoed long ago, and the header said 'finished: max-attempts' with a
    stopped clock before the run went on."""
    run_dir = await a_run_that_finished(tmp_path)
    runner = SlowStartRunner(device="cuda")  # the worker start the first frame comes before
    proposer = HeldProposer({"b1": [move("pass 1.5", "BLOCK 1024")]})
    run = resume_run(run_dir, runner=runner, proposer=proposer, overrides={"max_attempts": 6})
    app = KernelLadderApp(run=run, frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        state = app.main.screen_state()
        status = state["header"]
        assert status.endswith("resuming") and "finished" not in status, status
        assert "attempts 3/3" in status  # the earlier session's count, before the new budget
        assert state["gates"] == [] and app.main.view.gates == ()
        assert "⊘ #2 vetoed" in tree_text(app)
        said = [f"{n.title} {n.message}" for n in app._notifications]
        assert not any("waits for you" in s or "run finished" in s for s in said), said
        runner.release.set()
        await until(lambda: app.main.view.state == "running", "the session reopened", pilot=pilot)
        await until(lambda: 4 in app.main.view.attempts, "#4, this session's first", pilot=pilot)
        assert app.main.screen_state()["header"].split()[-1] in ("running", "finished")
        said = [f"{n.title} {n.message}" for n in app._notifications]
        assert not any("waits for you" in s for s in said), said


async def test_a_resumed_run_asks_again_for_a_gate_the_stop_set_aside(tmp_path):
    proposer = HeldProposer(
        {"b1": [move("pass 1.2", "BLOCK 256"), move("pass 1.4", "two-pass", undo="high")]}
    )
    options = RunOptions(
        op="scripted", proposer="scripted", branches=1, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=5, stagnation=20,
    )  # fmt: skip
    first = create_run(options, runner=ScriptedRunner(device="cuda"), proposer=proposer,
                       op=scripted_op())  # fmt: skip
    task = asyncio.ensure_future(first.run())
    for _ in range(1000):
        if "g1" in first.state.gates:
            break
        await asyncio.sleep(0.01)
    await first.stop("user")
    await asyncio.wait_for(task, 30)
    assert not first.state.pending_gates  # the stop resolved g1 ("run stopped")
    runner = SlowStartRunner(device="cuda")
    run = resume_run(first.run_dir, runner=runner, proposer=HeldProposer({}))
    app = KernelLadderApp(run=run, frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert app.main.view.gates == ()  # nothing waits while the session reopens
        assert app.main.screen_state()["header"].endswith("resuming")
        assert not any("waits for you" in (n.title or "") for n in app._notifications)
        runner.release.set()
        await until(lambda: app.main.view.state == "running", "the session reopened", pilot=pilot)
        await until(lambda: app.main.view.gates, "the new gate", pilot=pilot)
        await until(
            lambda: any(n.title == "gate g2 waits for you" for n in app._notifications),
            "one notice that the move's new gate g2 waits",
            pilot=pilot,
        )
        assert [g.attempt for g in app.main.view.gates] == [2]  # the same move, asked again
        await pilot.press("g", *"no", "enter")
        await until(lambda: logged(run, ev.GateResolved), "the veto", pilot=pilot)
        assert [(r.gate_id, r.decision, r.note) for r in logged(run, ev.GateResolved)] == [
            ("g1", "veto", "run stopped"),
            ("g2", "veto", "no"),
        ]


# --- 80x24 -----------------------------------------------------------------------------


async def footer_at(pilot, app) -> dict[str, tuple[str, bool, Region]]:
    keys = await settled_footer(pilot, app)
    return {description: (key, enabled, region) for key, (description, enabled, region) in
            keys.items()}  # fmt: skip


async def test_the_80_column_footer_keeps_target_stop_export_help_and_quit(tmp_path):
    """Before: at 80 columns the footer ran off the screen under '^p Commands' after
    Branch: Target, Stop, Export, Help and Quit were not shown, and the 'e' of Export
    showed after '^p Commands'."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, app, run)
        shown = await footer_at(pilot, app)
        palette = shown.pop("Commands")[2]
        for wanted in ("Target", "Stop", "Export", "Help", "Quit", "Approve", "Veto", "Pause"):
            assert wanted in shown and shown[wanted][1], (wanted, sorted(shown))
        for description, (_, _, region) in shown.items():
            assert region.right <= palette.x, (description, region, palette)  # none under it
        assert palette.right <= SMALL[0]
        # what was left out is still in the help screen, and its keys still work
        left_out = {"Prune", "Hints", "Br.hints", "Pause br.", "Branch"} - set(shown)
        assert left_out
        await pilot.press("question_mark")
        actions = {action for _, action, _ in app.screen.rows}
        assert left_out <= actions
        await pilot.press("escape", "t")
        assert isinstance(app.screen, InputPrompt)  # the Target key, from the footer


async def test_a_wide_footer_shows_every_key(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(pilot, app, run)
        shown = await footer_at(pilot, app)
        for wanted in ("Prune", "Hints", "Br.hints", "Pause br.", "Branch", "Target", "Quit"):
            assert wanted in shown


async def test_the_help_screen_scrolls_to_its_last_key_at_80x24(tmp_path):
    """Before: the help table was cut at 'View' at 80x24 and did not scroll."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot, app, run)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        dialog = app.screen.query_one("#help-dialog", VerticalScroll)
        assert app.focused is dialog
        await pilot.pause(0.1)
        assert dialog.max_scroll_y > 0 and dialog.scroll_y == 0
        assert "Every action by name" not in app.export_screenshot().replace("&#160;", " ")
        await pilot.press("down")
        await until(lambda: dialog.scroll_y == 1, "down scrolls one row", pilot=pilot)
        await pilot.press("pagedown")
        await until(lambda: dialog.scroll_y > 1, "pagedown scrolls a page", pilot=pilot)
        await pilot.press("end")
        await until(lambda: dialog.scroll_y == dialog.max_scroll_y, "the end", pilot=pilot)
        screen = app.export_screenshot().replace("&#160;", " ")
        assert "Every action by name" in screen  # the last row, ctrl+p, on screen
        # complete: every binding of the main screen and the app has its row
        rows = {(key, action) for key, action, _ in app.screen.rows}
        for binding in [*MainScreen.BINDINGS, *KernelLadderApp.BINDINGS]:
            if binding.id.startswith("replay."):
                continue  # a live run has no replay keys
            assert (key_label(binding), binding.description) in rows, binding.id


async def test_branch_rows_end_in_an_ellipsis_not_mid_word_at_80_columns():
    """Before: 'b3 two-pass  exhausted: stagnati' in the tree, 'b2 one-row-pe' in the
    per-branch speedups: a cut that read as a word."""
    app = replay_app(H200_RUN)
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        tree = app.main.query_one(StrategyTree)
        lines = [tree.render_line(y).text for y in range(tree.size.height)]
        assert any(line.rstrip().endswith("exhausted: stagnat…") for line in lines), lines
        width = tree.scrollable_content_region.width
        for y in range(len(tree._tree_lines)):
            node = tree._tree_lines[y].node
            depth = len(tree._tree_lines[y].path) - 2  # the hidden root, then branches at 0
            assert tree.get_label_width(node) + depth * tree.guide_depth <= width, y
        assert tree.max_scroll_x == 0  # no horizontal scrolling to read a row
        trends = [str(label.render()) for label in app.main.query("BranchTrend Label")]
        assert "b2 one-row-p…" in trends and "b1 multi-row" in trends


# --- a finished run, and the small things --------------------------------------------


def said(app) -> list[str]:
    return [f"{n.title} | {n.message}" for n in app._notifications]


async def stopped(pilot, app, run) -> None:
    await ready(pilot, app, run)
    await pilot.press("s", "y")
    await until(lambda: app.run_over, "the end of the run", pilot=pilot)
    await until(lambda: app.main.view.state == "finished", "the finished state", pilot=pilot)


async def test_a_finished_run_dims_its_steering_keys_and_says_why_when_pressed(tmp_path):
    """Before: on a finished run `p` and `h` did nothing, silently."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await stopped(pilot, app, run)
        keys = await settled_footer(pilot, app)
        assert keys["p"][:2] == ("Pause", False) and keys["h"][:2] == ("Hints", False)
        assert keys["e"][:2] == ("Export", True)  # exporting still applies
        app.clear_notifications()
        await pilot.press("p")
        await pilot.pause(0.1)
        assert said(app) == [" | The run has finished: there is nothing left to steer."]
        app.clear_notifications()
        await pilot.press("h")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, HintsEditor)
        assert said(app) == [" | The run has finished: there is nothing left to steer."]
        assert not logged(run, ev.RunPaused) and not logged(run, ev.HintEdited)


async def test_run_finished_says_its_reason_once(tmp_path):
    """Before: 'run finished: user-stop' as the title and 'user-stop' as the message."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await stopped(pilot, app, run)
        await pilot.pause(0.2)
        ending = [s for s in said(app) if "run finished" in s]
        assert len(ending) == 1 and ending[0].count("user-stop") == 1, said(app)


async def test_the_header_counts_vetoed_proposals_as_the_summary_does(tmp_path):
    """Before: 'attempts 2/3 … finished: max-attempts' (judged only) where the summary
    said 3 of 3: a vetoed proposal uses an attempt of the budget."""
    run_dir = await a_run_that_finished(tmp_path)
    events = read_events(run_dir)
    summary = summarize(fold(events))
    assert (summary["attempts"]["total"], summary["attempts"]["judged"]) == (3, 2)
    app = KernelLadderApp(events=events, run_dir=run_dir, frozen=True, at_end=True)
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        status = app.main.screen_state()["header"].splitlines()[1]
        assert "attempts 3/3" in status and status.endswith("finished: max-attempts"), status


def toasts(app) -> list[Toast]:
    rack = app.screen.query_one(ToastRack)
    return [w for w in rack.walk_children() if isinstance(w, Toast)]


@pytest.mark.parametrize("size", [SIZE, SMALL])
async def test_notifications_stay_off_the_gates_table(tmp_path, size):
    """Before: a toast ('gate g1 waits for you') covered the gates table it spoke of."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=size, notifications=True) as pilot:
        await ready(pilot, app, run)
        app.notify("one more notice", timeout=30)
        await until(lambda: len(toasts(app)) >= 2, "toasts shown", pilot=pilot)
        await until(
            lambda: all(t.region.height for t in toasts(app)), "toasts laid out", pilot=pilot
        )
        gates = app.main.query_one(GatesPanel).region
        header = app.main.query_one("#run-header").region
        assert gates.height >= 2  # the gate's row is on screen
        for toast in toasts(app):
            where = toast.region
            assert where.height and not where.overlaps(gates), (where, gates)
            assert not where.overlaps(header), (where, header)


async def test_export_says_the_absolute_path_it_wrote(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        best = app.main.view.best_attempt
        await pilot.press("e", "enter")
        out = tmp_path / f"best_scripted_{best}.py"
        await until(out.exists, "the exported file", pilot=pilot)
        await pilot.pause(0.1)
        assert f" | Wrote the best kernel (#{best}) to {out}." in said(app)


async def test_an_empty_target_with_no_target_set_records_nothing(tmp_path):
    """Before: enter on the empty target entry of a run without a target recorded
    `target_changed: null`."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        assert app.main.view.target is None
        await pilot.press("t", "enter")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, InputPrompt)
        assert not logged(run, ev.TargetChanged) and ("set_target", (None,)) not in (
            app.commands_sent
        )
        assert " | The target stays none." in said(app)
        await pilot.press("t", *"1.5", "enter")  # a change is still recorded
        await until(lambda: logged(run, ev.TargetChanged), "TargetChanged", pilot=pilot)
        assert [e.target for e in logged(run, ev.TargetChanged)] == [1.5]
