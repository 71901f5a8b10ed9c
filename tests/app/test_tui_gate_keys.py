"""The gate keys act on the gate the person pointed at: a, v, g, enter (and their
palette entries) decide or open the gate of the selected gated attempt, else the gate
the last notification named, and a toast names the gate decided.

The run is the default CPU run of attention with the real `search` proposer (helpers.py
cpu_search_app: its verdicts scripted, as this machine's CPU interpreter would give them
without its seconds per candidate): its three branches each wait at a gate at once, to
change to a line of their own (rmsnorm has one free line, so one gate waits at a time)."""

from __future__ import annotations

from helpers import cpu_search_app, logged, until
from textual.widgets import DataTable

from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.widgets.gates_panel import GatesPanel
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.engine.record import events as ev

SIZE = (160, 48)


async def three_gates(pilot, app) -> None:
    await until(lambda: len(app.main.view.gates) == 3, "three gates", 15, pilot=pilot)
    await pilot.pause(0.2)


async def select(pilot, app, attempt: int) -> None:
    tree = app.main.query_one(StrategyTree)
    tree.focus()
    tree.follow = False
    assert tree.select_attempt(attempt)
    await until(lambda: app.main.selected_attempt == attempt, f"#{attempt}", pilot=pilot)


def decided(run) -> list[tuple[str, str]]:
    return [(e.gate_id, e.decision) for e in logged(run, ev.GateResolved) if e.by == "user"]


def toasts(app) -> str:
    return " | ".join(f"{n.title}: {n.message}" for n in app._notifications)


async def test_a_approves_the_gate_of_the_selected_gated_attempt_and_says_so(tmp_path):
    """Before: with #15 (g3) selected, `a` approved g1 (the gates table's first row) and
    no toast said which gate was decided."""
    app, run = cpu_search_app(tmp_path, op="attention")
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        g3 = app.main.view.gate("g3")
        await select(pilot, app, g3.attempt)
        await pilot.press("a")
        await until(lambda: decided(run), "a decision", pilot=pilot)
        assert decided(run) == [("g3", "approve")]
        await until(lambda: "g3 approved" in toasts(app), "the toast", pilot=pilot)
        assert f"g3 approved: #{g3.attempt} {g3.move}" in toasts(app)


async def test_v_vetoes_the_selected_gate_and_g_opens_it(tmp_path):
    app, run = cpu_search_app(tmp_path, op="attention")
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        await select(pilot, app, app.main.view.gate("g2").attempt)
        await pilot.press("g")
        await until(lambda: isinstance(app.screen, GatePrompt), "the prompt", pilot=pilot)
        assert app.screen.gate.gate_id == "g2"
        await pilot.press("escape")
        await pilot.press("v")
        await until(lambda: decided(run), "a decision", pilot=pilot)
        assert decided(run) == [("g2", "veto")]


async def test_enter_on_a_gated_attempts_line_opens_its_gate(tmp_path):
    """Before: enter on a gated tree line did nothing."""
    app, run = cpu_search_app(tmp_path, op="attention")
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        await select(pilot, app, app.main.view.gate("g1").attempt)
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, GatePrompt), "the prompt", pilot=pilot)
        assert app.screen.gate.gate_id == "g1"
        await pilot.press("ctrl+a")
        await until(lambda: decided(run), "a decision", pilot=pilot)
        assert decided(run) == [("g1", "approve")]
        await until(lambda: "g1 approved" in toasts(app), "the toast", pilot=pilot)


async def test_with_no_gated_attempt_selected_a_acts_on_the_gate_the_notification_named(
    tmp_path,
):
    """Before: `a` decided the gates table's first row whatever the toast had named."""
    app, run = cpu_search_app(tmp_path, op="attention")
    app.NOTIFICATION_TIMEOUT = 0.5  # the first announcement (three gates) is gone soon
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        await until(lambda: not app._notifications, "the toasts gone", pilot=pilot)
        await select(pilot, app, app.main.view.gate("g1").attempt)
        await pilot.press("a")  # b1 goes on, and its next gate is announced alone
        await until(lambda: app.main.view.gate("g4") is not None, "g4", 15, pilot=pilot)
        await until(lambda: app.main.named_gates == ("g4",), "g4 named alone", pilot=pilot)
        await select(pilot, app, 1)  # an attempt that waits at no gate
        await pilot.press("a")
        await until(lambda: len(decided(run)) == 2, "the second decision", pilot=pilot)
        assert decided(run) == [("g1", "approve"), ("g4", "approve")]


async def test_a_toast_naming_several_gates_leaves_a_and_v_to_the_selection(tmp_path):
    app, run = cpu_search_app(tmp_path, op="attention")
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        assert "3 gates wait for you: g1, g2, g3" in toasts(app)
        await select(pilot, app, 1)
        await pilot.press("a")
        await pilot.pause(0.3)
        assert decided(run) == []
        assert "select one in the strategy graph or the gates table" in toasts(app)
        await pilot.press("g")  # g decides each in turn: the first named
        await until(lambda: isinstance(app.screen, GatePrompt), "the prompt", pilot=pilot)
        assert app.screen.gate.gate_id == "g1"


async def test_the_gates_tables_row_is_what_a_acts_on_while_it_has_the_focus(tmp_path):
    app, run = cpu_search_app(tmp_path, op="attention")
    async with app.run_test(size=SIZE) as pilot:
        await three_gates(pilot, app)
        table = app.main.query_one(GatesPanel).query_one(DataTable)
        table.focus()
        await pilot.press("down", "down")
        await pilot.press("a")
        await until(lambda: decided(run), "a decision", pilot=pilot)
        assert decided(run) == [("g3", "approve")]
