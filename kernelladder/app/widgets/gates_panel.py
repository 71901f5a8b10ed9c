"""Pending gates: each risky move with its undo cost and reason, waiting for approve or
veto; a countdown when a timeout policy will decide on its own."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable

from kernelladder.app import view as v

UNDO_STYLES = {"high": "bold $error", "medium": "$warning", "low": "$success"}


def countdown(gate: v.GateView, now: float, after_policy: str) -> str:
    """'veto in 42s' when a timeout applies, else who decides."""
    if gate.timeout_s is None:
        return "waits for you" if gate.policy == "ask" else gate.policy
    left = max(0, int(round(gate.raised_ts + gate.timeout_s - now)))
    action = gate.policy if gate.policy in ("approve", "veto") else after_policy
    return f"{action} in {left}s"


class GatesPanel(DataTable):
    DEFAULT_CSS = """
    GatesPanel {
        height: auto;
        max-height: 9;
        background: $surface;
        border-top: solid $warning 60%;
    }
    GatesPanel.-empty {
        border-top: solid $panel;
        max-height: 3;
    }
    """

    class GateChosen(Message):
        """Enter on a gate: open its prompt."""

        def __init__(self, gate_id: str) -> None:
            super().__init__()
            self.gate_id = gate_id

    def __init__(self, *, clock: Callable[[], float], replay: bool = False, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._clock = clock
        self._replay = replay
        self._view: v.RunView = v.EMPTY_VIEW
        self._gates: tuple[v.GateView, ...] = ()

    def on_mount(self) -> None:
        self.add_column("gate", key="gate")
        self.add_column("branch", key="branch")
        self.add_column("#", key="attempt")
        self.add_column("undo", key="undo")
        self.add_column("move", key="move")
        self.add_column("reason", key="reason")
        self.add_column("decides", key="countdown")
        self.set_interval(1.0, self._tick, name="gate-countdown")
        self._rebuild()

    def now(self) -> float:
        if self._replay:
            return self._view.last_ts or 0.0
        return self._clock()

    @property
    def selected_gate(self) -> str | None:
        if not self._gates:
            return None
        row = min(max(self.cursor_row, 0), len(self._gates) - 1)
        return self._gates[row].gate_id

    def show(self, view: v.RunView) -> None:
        self._view = view
        if view.gates != self._gates:
            self._gates = view.gates
            self._rebuild()
        else:
            self._tick()

    def _after_policy(self) -> str:
        return str((self._view.settings or {}).get("gate_timeout_policy", "policy"))

    def _rebuild(self) -> None:
        if not self.columns:
            return
        keep = self.selected_gate
        self.clear()
        self.set_class(not self._gates, "-empty")
        if not self._gates:
            self.add_row("", "", "", "", Content.styled("no pending gates", "$text-muted"), "", "")
            return
        now = self.now()
        for g in self._gates:
            self.add_row(
                Content.styled(g.gate_id, "bold"),
                g.branch_id,
                f"#{g.attempt}",
                Content.styled(g.undo_cost, UNDO_STYLES.get(g.undo_cost, "")),
                g.move,
                g.reason,
                countdown(g, now, self._after_policy()),
                key=g.gate_id,
            )
        ids = [g.gate_id for g in self._gates]
        if keep in ids:
            self.move_cursor(row=ids.index(keep), animate=False)

    def _tick(self) -> None:
        now = self.now()
        for g in self._gates:
            if g.timeout_s is not None:
                self.update_cell(g.gate_id, "countdown", countdown(g, now, self._after_policy()))

    def select_gate(self, gate_id: str) -> None:
        ids = [g.gate_id for g in self._gates]
        if gate_id in ids:
            self.move_cursor(row=ids.index(gate_id), animate=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self._gates and event.row_key.value:
            self.post_message(self.GateChosen(str(event.row_key.value)))
