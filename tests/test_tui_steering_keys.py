"""Steering keys that do what the person meant: the gate prompt never approves by
accident, follow keeps the newest attempt, a resumed run shows its folded state from the
first frame, every key stays reachable at 80x24, and a finished run says which keys no
longer apply.

The engine is the real one (kernelladder.engine.engine.Run) with the steering tests'
doubles for what this machine lacks: ScriptedRunner (no GPU: verdicts read from a marker
line in the candidate) and HeldProposer (no model: scripted moves, then it waits).
"""

from __future__ import annotations

from test_tui_steering import live_app, logged, ready, until
from textual.widgets import Input, Label

from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.engine import events as ev

SIZE = (150, 44)
SMALL = (80, 24)


# --- the gate prompt -------------------------------------------------------------------


async def open_gate_prompt(pilot, app, run) -> GatePrompt:
    await ready(pilot, app, run)
    await pilot.press("g")
    await until(pilot, lambda: isinstance(app.screen, GatePrompt), "the gate prompt")
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
        await until(pilot, lambda: logged(run, ev.GateResolved), "GateResolved in the log")
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
        await until(pilot, lambda: logged(run, ev.GateResolved), "GateResolved in the log")
        resolved = logged(run, ev.GateResolved)
        assert [(r.gate_id, r.decision, r.note) for r in resolved] == [("g1", "approve", "")]


async def test_ctrl_v_vetoes_from_the_gate_prompt_without_a_note(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_gate_prompt(pilot, app, run)
        await pilot.press("ctrl+v")
        await until(pilot, lambda: logged(run, ev.GateResolved), "GateResolved in the log")
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
