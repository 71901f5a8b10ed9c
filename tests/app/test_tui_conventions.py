"""Conventions people know from loved TUIs (lazygit, k9s, posting): the help screen says
how to close it and lists the navigation keys; the command palette lists the app's own
commands only; `/` filters the strategy graph; a replay's footer shows its speed keys
at 80 columns. The screens are the committed CPU run replayed (examples/)."""

from __future__ import annotations

from helpers import EXAMPLES, footer_keys, replay_app, settled_footer, tree_text, until

from kernelladder.app.modals.help_screen import HelpScreen

CPU_RUN = EXAMPLES / "cpu-rmsnorm-run"


async def test_help_says_how_to_close_it_and_lists_the_navigation_keys():
    app = replay_app(CPU_RUN)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.note.startswith("escape, ? or q closes this.")
        rows = app.screen.rows
        titles = [action for key, action, what in rows if not key and not what]
        assert "Navigation" in titles, titles
        keys = {key: action for key, action, _ in rows}
        assert keys["↑ ↓"] == "Move" and keys["tab"] == "Focus"
        assert keys["/"] == "Filter"
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_the_command_palette_lists_the_apps_own_commands_only():
    from textual.command import CommandList, CommandPalette

    app = replay_app(CPU_RUN)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("ctrl+p")
        await until(lambda: isinstance(app.screen, CommandPalette), "the palette", pilot=pilot)
        commands = app.screen.query_one(CommandList)
        await until(lambda: commands.option_count > 10, "the commands listed", pilot=pilot)
        titles = [str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)]
        joined = "\n".join(titles)
        for generic in ("Keys", "Maximize", "Screenshot"):
            assert generic not in joined, joined
        for ours in ("Prune selected branch", "Filter strategy graph", "Change theme", "Quit"):
            assert ours in joined, joined
        # a replay cannot steer: the palette says so beside each steering command
        prune = next(t for t in titles if "Prune selected branch" in t)
        assert "not now: This is a replay" in prune, prune
        theme = next(t for t in titles if "Change theme" in t)
        assert "not now" not in theme, theme


async def test_slash_filters_the_strategy_graph_and_escape_clears_it():
    app = replay_app(CPU_RUN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        everything = tree_text(app)
        await pilot.press("slash", *"EPT")
        await until(lambda: tree_text(app) != everything, "the filtered graph", pilot=pilot)
        lines = tree_text(app).splitlines()
        attempts = [line for line in lines if "#" in line and "best #" not in line]
        assert attempts and all("EPT" in line for line in attempts), lines
        assert "filter: ept" in str(app.main.query_one("#strategy-title").render())
        position = app.player.position
        await pilot.press("home")  # the filter's cursor, not the replay's jump to its start
        assert app.player.position == position
        await pilot.press("escape")
        await until(lambda: tree_text(app) == everything, "the whole graph again", pilot=pilot)


async def test_a_replay_footer_shows_its_speed_keys_at_80_columns():
    app = replay_app(CPU_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        keys = await settled_footer(pilot, app)
        assert keys["plus"][:2] == ("Faster", True), keys
        assert keys["minus"][:2] == ("Slower", True), keys
        assert all(region.right <= 80 for _, _, region in footer_keys(app).values())


async def test_escape_clears_a_filter_kept_with_enter():
    """Before: enter kept the filter and gave the graph the focus, and escape then did
    nothing, though the help says escape clears it."""
    app = replay_app(CPU_RUN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        everything = tree_text(app)
        await pilot.press("slash", *"EPT", "enter")
        await until(lambda: tree_text(app) != everything, "the filtered graph", pilot=pilot)
        assert app.focused is app.main.query_one("#strategy-tree")
        await pilot.press("escape")
        await until(lambda: tree_text(app) == everything, "the whole graph again", pilot=pilot)
        assert str(app.main.query_one("#strategy-title").render()) == "strategy graph"


async def test_the_prune_and_stop_questions_say_their_keys(tmp_path):
    """Before: the x and s confirm dialogs showed two buttons and no key hint."""
    from helpers import live_app, ready

    from kernelladder.app.modals.confirm import ConfirmScreen

    app, run = live_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot, app, run)
        for key, answer in (("x", "y: prune · n or esc: cancel"), ("s", "y: stop run")):
            await pilot.press(key)
            await until(lambda: isinstance(app.screen, ConfirmScreen), "the question", pilot=pilot)
            assert str(app.screen.query_one("#confirm-keys").render()).startswith(answer)
            await pilot.press("n")
            await pilot.pause(0.1)


async def test_ctrl_c_pressed_again_while_quitting_asks_stops_and_quits(tmp_path):
    """Before: the second ctrl+c opened the same question again over the first."""
    from helpers import live_app, logged, ready

    from kernelladder.app.modals.confirm import ConfirmScreen
    from kernelladder.engine.record import events as ev

    app, run = live_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot, app, run)
        await pilot.press("ctrl+c")
        await until(lambda: isinstance(app.screen, ConfirmScreen), "the question", pilot=pilot)
        assert "ctrl+c again: stop and quit" in str(app.screen.query_one("#confirm-keys").render())
        await pilot.press("ctrl+c")
        await until(lambda: logged(run, ev.StopRequested), "the stop", pilot=pilot)
        await until(lambda: not app.is_running, "the app quit", 15, pilot=pilot)
