"""A read-only app (what `kernelladder serve --read-only` gives each page): the steering
keys and export (a file written where the app runs) do nothing but say why, the palette
refuses them too, a gate that waits is named but no one is asked to decide it, and
quitting asks nothing and sends no stop. The real engine with the steering tests' doubles (tests/helpers.py: live_app)."""

from __future__ import annotations

from helpers import live_app, logged, ready, until

from kernelladder.engine.record import events as ev


async def test_a_read_only_app_sends_no_steering_and_says_why(tmp_path):
    app, run = live_app(tmp_path)
    app.read_only = True
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app, run)
        await pilot.pause(0.1)
        # a gate waits: the page names it and asks no one to decide it
        notes = [f"{n.title} {n.message}" for n in app._notifications]
        assert any("waiting at gate g1" in n for n in notes), notes
        assert not any("press g" in n or "decide" in n for n in notes), notes
        title = str(app.main.query_one("#gates .gates-title").render())
        assert "read-only" in title and "approve" not in title and "veto" not in title, title
        table = app.main.query_one("#gates DataTable")
        cells = [str(c) for row in range(table.row_count) for c in table.get_row_at(row)]
        assert "waits for a decision" in cells and "waits for you" not in cells, cells
        for key in ("p", "b", "a", "v", "g", "enter", "s", "t", "x", "e"):
            await pilot.press(key)
            await pilot.pause(0.05)
        assert app.commands_sent == [] and app.screen is app.main  # no dialog opened
        assert not logged(run, ev.RunPaused) and not logged(run, ev.GateResolved)
        notes = [n.message for n in app._notifications]
        assert any("read-only view: steering is off" in m for m in notes)
        assert app.main.check_action("pause_run", ()) is None  # shown disabled
        assert app.main.check_action("export_best", ()) is None  # writes on the server
        app.main.action_export_best()  # the palette's path
        assert app.screen is app.main
        app.steer("pause")  # the palette's path ends here too
        assert app.commands_sent == []
        await pilot.press("q")  # leaves without asking to stop the run
        await until(lambda: not app.is_running, "the app to exit", pilot=pilot)
    assert not logged(run, ev.StopRequested) and app.detached
