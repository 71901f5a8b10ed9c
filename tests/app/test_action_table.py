"""Every action of the app is declared once (app/actions.py) and every view of the key
map is built from that table: the main screen's and the app's bindings, the command
palette, the footer's drop order, the help sections and the steering / replay sets."""

from __future__ import annotations

from kernelladder.app import actions
from kernelladder.app.app import KernelLadderApp
from kernelladder.app.commands import PALETTE_COMMANDS
from kernelladder.app.screens.main import (
    FOOTER_DROP_ORDER,
    REPLAY_ACTIONS,
    STEERING_ACTIONS,
    MainScreen,
)
from kernelladder.engine.run.control import STEERING_COMMANDS


def test_each_action_is_one_row_and_every_view_is_built_from_the_rows():
    ids = [a.id for a in actions.ACTIONS]
    assert len(ids) == len(set(ids))
    screen = [a for a in actions.ACTIONS if a.section != actions.APP]
    assert [b.id for b in MainScreen.BINDINGS] == [a.id for a in screen]
    assert [b.id for b in KernelLadderApp.BINDINGS] == ["app.quit", "app.quit_ctrl", "app.palette"]
    listed = [a for a in actions.ACTIONS if a.palette]
    assert [c.action for c in PALETTE_COMMANDS] == [
        a.screen_action for a in sorted(listed, key=lambda a: a.palette[0])
    ]
    assert sorted(a.palette[0] for a in listed) == list(range(1, len(listed) + 1))
    assert {a.section for a in actions.ACTIONS} == {s for s, _ in actions.SECTIONS}
    assert all(actions.ACTIONS[ids.index(i)].show for i in FOOTER_DROP_ORDER)


def test_steering_actions_are_the_steer_rows_and_each_has_its_screen_method():
    assert {a.name for a in actions.ACTIONS if a.id.startswith("steer.")} == STEERING_ACTIONS
    assert {a.name for a in actions.ACTIONS if a.id.startswith("replay.")} == REPLAY_ACTIONS
    for a in actions.ACTIONS:
        if a.section in (actions.STEER, actions.REPLAY):
            assert callable(getattr(MainScreen, f"action_{a.name}", None)), a.id
    # what the steering actions send is RunControl's set, the one the control channel serves
    assert {
        "prune", "edit_hints", "approve", "veto", "pause", "resume", "open_branch",
        "set_target", "stop",
    } == STEERING_COMMANDS  # fmt: skip
