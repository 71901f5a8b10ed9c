"""Every steering action, end to end: the key press, the command sent through the
engine's RunControl, the event recorded in the run's log, the screen changed.

The engine is the real one (kernelladder.engine.engine.Run). Its runner and proposer are
test doubles, because this machine has no GPU (no speedup exists here) and no model:
the runner is the engine tests' ScriptedRunner (verdicts read from a marker line in the
candidate), and HeldProposer (helpers.py) hands out scripted moves per branch and then waits,
so the run stays live while the test steers it.
"""

from __future__ import annotations

import pytest
from helpers import (
    SIZE,
    HeldProposer,
    SlowStartRunner,
    footer_keys,
    live_app,
    logged,
    move,
    ready,
    scripted_op,
    settled_footer,
    tree_text,
    until,
)

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.modals.confirm import ConfirmScreen
from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.modals.help_screen import HelpScreen
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.modals.input_prompt import InputPrompt
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.engine import events as ev
from kernelladder.engine.engine import create_run
from kernelladder.engine.log import read_events
from kernelladder.engine.options import RunOptions


async def select(pilot, app, attempt: int | None = None, branch: str | None = None) -> None:
    """Move the tree's cursor as a person would, and wait until the screen follows."""
    tree = app.main.query_one(StrategyTree)
    tree.follow = False
    if attempt is not None:
        assert tree.select_attempt(attempt)
        await until(
            lambda: app.main.selected_attempt == attempt, f"#{attempt} selected", pilot=pilot
        )
    else:
        tree.move_cursor(tree._branch_nodes[branch], animate=False)
        await until(lambda: app.main.selected_branch == branch, f"{branch} selected", pilot=pilot)


async def test_prune_asks_then_prunes_the_branch(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await select(pilot, app, branch="b2")
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: logged(run, ev.BranchPruned), "BranchPruned in the log", pilot=pilot)
        assert ("prune", ("b2",)) in app.commands_sent
        pruned = logged(run, ev.BranchPruned)[0]
        assert (pruned.branch_id, pruned.by) == ("b2", "user")
        await until(lambda: "b2 beta  pruned" in tree_text(app), "pruned on screen", pilot=pilot)


async def test_global_hints_editor_records_hint(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("h")
        assert isinstance(app.screen, HintsEditor) and app.screen.scope == "global"
        await pilot.press(*"use rows", "ctrl+s")
        await until(lambda: logged(run, ev.HintEdited), "HintEdited in the log", pilot=pilot)
        hint = logged(run, ev.HintEdited)[0]
        assert (hint.text, hint.branch_id, hint.by) == ("use rows", None, "user")
        await until(lambda: app.main.view.hints == "use rows", "hints in the state", pilot=pilot)


async def test_branch_hints_editor_records_hint_for_selected_branch(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await select(pilot, app, branch="b2")
        await pilot.press("H")
        assert isinstance(app.screen, HintsEditor) and app.screen.scope == "b2"
        await pilot.press(*"no atomics", "ctrl+s")
        await until(lambda: logged(run, ev.HintEdited), "HintEdited in the log", pilot=pilot)
        hint = logged(run, ev.HintEdited)[0]
        assert (hint.text, hint.branch_id) == ("no atomics", "b2")
        await until(
            lambda: app.main.view.branch("b2").hints == "no atomics", "branch hints", pilot=pilot
        )


async def test_hints_editor_escape_sends_nothing(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("h", *"abc", "escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, HintsEditor)
        assert not logged(run, ev.HintEdited) and not app.commands_sent


async def test_approve_selected_gate(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        assert "gates 1 waiting" in app.main.screen_state()["header"]
        await pilot.press("a")
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)[0]
        assert (resolved.gate_id, resolved.decision, resolved.by) == ("g1", "approve", "user")
        # approved: the move is verified, and the gates panel empties
        await until(lambda: app.main.view.attempts[3].state == "judged", "#3 verified", pilot=pilot)
        assert app.main.screen_state()["gates"] == []
        assert "gates 1 waiting" not in app.main.screen_state()["header"]


async def test_veto_selected_gate(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("v")
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)[0]
        assert (resolved.gate_id, resolved.decision) == ("g1", "veto")
        await until(lambda: "⊘ #3 vetoed" in tree_text(app), "vetoed on screen", pilot=pilot)


async def test_a_vetoed_attempts_verdict_tab_says_it_was_vetoed_with_the_note(tmp_path):
    from kernelladder.app.widgets.verdict_view import render_verdict

    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("v")
        await until(lambda: "⊘ #3 vetoed" in tree_text(app), "vetoed on screen", pilot=pilot)
        await select(pilot, app, attempt=3)
        await pilot.press("2")
        await pilot.pause(0.1)
        shown = str(app.main.query_one("#verdict-body").render())
        assert "vetoed at gate g1 by user: vetoed with v, no note given" in shown, shown
        assert "not judged yet" not in shown
        assert shown == render_verdict(app.main.view.attempts[3], None).plain


async def test_gate_prompt_vetoes_with_a_note(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("g")
        assert isinstance(app.screen, GatePrompt) and app.screen.gate.gate_id == "g1"
        await pilot.click("#gate-note")
        await pilot.press(*"keep one pass", "ctrl+v")
        await until(lambda: logged(run, ev.GateResolved), "GateResolved in the log", pilot=pilot)
        resolved = logged(run, ev.GateResolved)[0]
        assert (resolved.decision, resolved.note) == ("veto", "keep one pass")


async def test_pause_and_resume_run(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("p")
        await until(lambda: logged(run, ev.RunPaused), "RunPaused in the log", pilot=pilot)
        await until(lambda: app.main.view.state == "paused", "paused state", pilot=pilot)
        assert app.main.screen_state()["header"].endswith("paused")
        # the footer offers what p does now
        keys = await settled_footer(pilot, app)
        assert keys["p"][:2] == ("Resume", True), keys
        await pilot.press("p")
        await until(lambda: logged(run, ev.RunResumed), "RunResumed in the log", pilot=pilot)
        await until(lambda: app.main.view.state == "running", "running again", pilot=pilot)
        await until(lambda: footer_keys(app)["p"][0] == "Pause", "p Pause again", pilot=pilot)


async def test_pause_and_resume_selected_branch(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await select(pilot, app, branch="b2")
        await pilot.press("b")
        await until(lambda: logged(run, ev.BranchPaused), "BranchPaused in the log", pilot=pilot)
        assert logged(run, ev.BranchPaused)[0].branch_id == "b2"
        await until(lambda: "b2 beta  paused" in tree_text(app), "paused on screen", pilot=pilot)
        await pilot.press("b")
        await until(lambda: logged(run, ev.BranchResumed), "BranchResumed in the log", pilot=pilot)
        await until(
            lambda: "b2 beta  paused" not in tree_text(app), "resumed on screen", pilot=pilot
        )


async def test_open_branch_from_selected_attempt(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await select(pilot, app, attempt=1)
        await pilot.press("o")
        assert isinstance(app.screen, InputPrompt)
        await pilot.press(*"wide rows", "enter")
        await until(
            lambda: logged(run, ev.BranchOpened)[-1].by == "user", "BranchOpened", pilot=pilot
        )
        opened = logged(run, ev.BranchOpened)[-1]
        assert (opened.branch_id, opened.from_attempt, opened.strategy) == ("b3", 1, "wide rows")
        await until(
            lambda: "b3 wide rows from #1" in tree_text(app), "new branch shown", pilot=pilot
        )
        # nested under the attempt it was opened from
        lines = app.main.screen_state()["tree"]
        row = next(i for i, line in enumerate(lines) if "✓ #1 " in line)
        assert lines[row + 1].startswith("    b3 wide rows")


async def test_change_target_checks_input_then_records(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("t", *"fast", "enter")
        assert isinstance(app.screen, InputPrompt)  # refused: not a number
        assert "Not a number" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press(*["backspace"] * 4, *"2.5", "enter")
        await until(lambda: logged(run, ev.TargetChanged), "TargetChanged in the log", pilot=pilot)
        assert logged(run, ev.TargetChanged)[0].target == 2.5
        await until(
            lambda: "target 2.50×" in app.main.screen_state()["header"], "header", pilot=pilot
        )


async def test_stop_run_asks_then_finishes(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: logged(run, ev.RunFinished), "RunFinished in the log", pilot=pilot)
        assert logged(run, ev.StopRequested)[0].by == "user"
        await until(lambda: app.run_over, "the app saw the end", pilot=pilot)
        # the engine task may end a moment before its last batch of events is drawn
        await until(
            lambda: "finished: user-stop" in app.main.screen_state()["header"],
            "the header to show the stop",
            pilot=pilot,
        )
        # nothing left to steer: the bindings say so, the palette explains
        assert app.main.check_action("prune_branch", ()) is None
        await app.main.run_from_palette("prune_branch")
        await pilot.pause()
        assert any("finished" in n.message for n in app._notifications)


async def test_export_best_kernel_writes_its_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        best = app.main.view.best_attempt
        await pilot.press("e")
        assert isinstance(app.screen, InputPrompt)
        await pilot.press("enter")
        await pilot.pause(0.1)
        out = tmp_path / f"best_scripted_{best}.py"
        assert out.read_text() == (run.run_dir / "attempts" / f"{best}.py").read_text()


async def test_quit_while_running_asks_and_stops(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not logged(run, ev.StopRequested)
        await pilot.press("q", "y")
        await until(lambda: not app.is_running, "the app exited", timeout=15, pilot=pilot)
    assert logged(run, ev.StopRequested)
    assert read_events(run.run_dir)[-1].kind == "run_finished"  # the log is complete


async def test_help_lists_every_binding(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        actions = {action for _, action, _ in app.screen.rows}
        for wanted in ("Prune", "Hints", "Approve", "Veto", "Pause", "Br.hints", "Target", "Stop"):
            assert wanted in actions
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_palette_runs_steering_commands(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("ctrl+p")
        await pilot.press(*"pause run")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(lambda: logged(run, ev.RunPaused), "RunPaused via the palette", pilot=pilot)


@pytest.mark.parametrize("key", ["x", "h", "a", "v", "p", "o", "t", "s"])
def test_every_steering_key_is_in_the_palette(key):
    from kernelladder.app.commands import PALETTE_COMMANDS
    from kernelladder.app.screens.main import STEERING_ACTIONS, MainScreen

    actions = {c.action for c in PALETTE_COMMANDS}
    binding = next(b for b in MainScreen.BINDINGS if b.key == key and b.id.startswith("steer."))
    assert binding.action in actions and binding.action in STEERING_ACTIONS
    assert binding.tooltip and binding.id


@pytest.mark.slow
@pytest.mark.needs_torch
async def test_real_cpu_search_run_steered_from_the_app(tmp_path):
    """No doubles at all: the built-in search proposer and the real verifier on the CPU
    (Triton's interpreter; no speed is measured). A branch opened from an attempt changes
    algorithm family, so it waits at a gate; the person approves it, then stops."""
    pytest.importorskip("torch", reason="the real verifier needs torch (the 3.12 pass has none)")
    options = RunOptions(op="rmsnorm", device="cpu", branches=2, max_attempts=30, gate="ask",
                         run_dir=str(tmp_path / "run"))  # fmt: skip
    run = create_run(options)
    app = KernelLadderApp(run=run, frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(
            lambda: app.main.view.attempts_judged >= 1, "a verdict", timeout=120, pilot=pilot
        )
        assert "speed not measured (no GPU)" in app.main.screen_state()["header"]
        await select(pilot, app, attempt=1)
        await pilot.press("o", *"persistent", "enter")
        await until(lambda: app.main.view.gates, "a gate", timeout=120, pilot=pilot)
        gate = app.main.view.gates[0]
        assert gate.undo_cost == "high" and "family" in gate.reason
        await pilot.press("a")
        await until(lambda: logged(run, ev.GateResolved), "the approval", pilot=pilot)
        await pilot.press("s", "y")
        await until(lambda: app.run_over, "the end of the run", timeout=120, pilot=pilot)
        # the engine task may end a moment before its last batch of events is drawn
        await until(
            lambda: "finished: user-stop" in app.main.screen_state()["header"],
            "the header to show the stop",
            pilot=pilot,
        )
    events = read_events(run.run_dir)
    opened = [e for e in events if isinstance(e, ev.BranchOpened) and e.by == "user"]
    resolved = [e for e in events if isinstance(e, ev.GateResolved)]
    assert opened and opened[0].from_attempt == 1
    assert (resolved[0].decision, resolved[0].by) == ("approve", "user")
    assert events[-1].kind == "run_finished"


async def test_header_says_what_the_run_waits_for_before_its_first_event(tmp_path):
    options = RunOptions(
        op="scripted", proposer="scripted", branches=1, device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=1,
    )  # fmt: skip
    runner = SlowStartRunner(device="cuda")
    proposer = HeldProposer({"b1": [move("pass 1.2", "BLOCK 256")]})
    run = create_run(options, runner=runner, proposer=proposer, op=scripted_op())
    app = KernelLadderApp(run=run, frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        header = str(app.main.query_one("#run-header").render())
        # it said only "waiting for the run…" for the seconds a worker takes to start
        assert "scripted on cuda: starting the verifier worker" in header
        runner.release.set()
        await until(lambda: app.main.view.op, "the run's first event", pilot=pilot)
        await pilot.pause(0.1)
        header = str(app.main.query_one("#run-header").render())
        assert "starting the verifier" not in header and "scripted" in header


async def test_hints_editor_shows_which_lines_are_directives(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("h")
        report = app.screen.query_one("#hints-directives")
        assert "prefer FAMILY" in str(report.render())  # the syntax, before anything is typed
        await pilot.press(*"prefer two-pass", "enter", *"fix EPT", "enter", *"go wide")
        await pilot.pause(0.1)
        shown = str(report.render())
        assert "understood: prefer two-pass" in shown
        assert "not understood: fix EPT (fix takes PARAM=VALUE)" in shown
        assert "free text: 1 line" in shown
        assert "reads only directives" not in shown  # this run's proposer is not the search
        # a line not understood has no effect anywhere: the editor does not apply it
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HintsEditor) and not logged(run, ev.HintEdited)
        assert str(report.render()).startswith("Not applied: correct or remove what is not")
        assert "not understood: fix EPT (fix takes PARAM=VALUE)" in str(report.render())
        app.screen.query_one("#hints-text").text = "prefer two-pass\ngo wide"
        await pilot.press("ctrl+s")
        await until(lambda: logged(run, ev.HintEdited), "HintEdited in the log", pilot=pilot)
        assert logged(run, ev.HintEdited)[0].text == "prefer two-pass\ngo wide"


def test_hints_editor_tells_a_search_run_that_free_text_is_not_read():
    editor = HintsEditor("global", "", op="rmsnorm", proposer="search")
    report = editor.directive_report("avoid persistent\nprefer warp-shuffle\nuse fewer loads")
    assert report.splitlines()[0] == "understood: avoid persistent"
    assert report.splitlines()[1].startswith("not understood: prefer warp-shuffle (no family")
    assert report.splitlines()[-1] == (
        "the search proposer reads only directives; free text goes to model proposers"
    )
