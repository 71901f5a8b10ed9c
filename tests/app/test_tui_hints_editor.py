"""The hints editor: a line it does not understand is applied nowhere, typing goes after
what is there, and applying unchanged text sends nothing.

The run is the default CPU run of rmsnorm with the real `search` proposer (its families
and parameters are what the editor checks against), verdicts scripted (helpers.py)."""

from __future__ import annotations

from helpers import cpu_search_app, logged, until
from textual.widgets import Static

from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.engine.record import events as ev

SIZE = (160, 48)


def person_events(run) -> list:
    return [e for e in logged(run, ev.Event) if getattr(e, "by", None) in ("user", "hints")]


async def open_editor(pilot, app, key: str = "h") -> HintsEditor:
    await until(lambda: app.main.view.gates, "a gate", 15, pilot=pilot)
    await pilot.press(key)
    await until(lambda: isinstance(app.screen, HintsEditor), "the editor", pilot=pilot)
    return app.screen


async def test_a_rejected_line_is_not_applied_and_no_gate_is_vetoed(tmp_path):
    """Before: the editor said `not understood: fix ROWS=3 (ROWS takes one of 1, 2, 4, 8,
    16)`, ctrl+s applied it all the same, and g2 and g3 were vetoed by "hints" with the
    note "fix ROWS=3"."""
    app, run = cpu_search_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        editor = await open_editor(pilot, app)
        waiting = [g.gate_id for g in app.main.view.gates]
        await pilot.press(*"fix ROWS", "equals_sign", "3", "ctrl+s")
        await pilot.pause(0.3)
        assert app.screen is editor  # still open, saying why
        report = str(editor.query_one("#hints-directives", Static).render())
        assert report.startswith("Not applied: correct or remove what is not understood")
        assert "not understood: fix ROWS=3 (ROWS takes one of 1, 2, 4, 8, 16)" in report
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert person_events(run) == []
        assert [g.gate_id for g in app.main.view.gates] == waiting


async def test_typing_goes_after_the_hints_already_there(tmp_path):
    """Before: the editor reopened with the cursor at the start: what was typed ran into
    the first directive ("fix EPT=8" became "fix EPT=8fix ROWS=4")."""
    app, run = cpu_search_app(tmp_path, hints="fix ROWS=4")
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot, app)
        await pilot.press("enter", *"try EPT", "equals_sign", "8", "ctrl+s")
        await until(lambda: logged(run, ev.HintEdited), "the edit", pilot=pilot)
        assert logged(run, ev.HintEdited)[0].text == "fix ROWS=4\ntry EPT=8"


async def test_applying_unchanged_hints_sends_nothing_and_says_so(tmp_path):
    """Before: ctrl+s on unchanged text logged another hint_edited."""
    app, run = cpu_search_app(tmp_path, hints="fix ROWS=4")
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot, app)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, HintsEditor)
        assert person_events(run) == [] and not app.commands_sent
        assert any("unchanged" in str(n.message) for n in app._notifications)
