"""Pending gates: each risky move with its undo cost and reason, waiting for approve or
veto; a countdown when a timeout policy will decide on its own."""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Label

from kernelladder.app import view as v

UNDO_STYLES = {"high": "bold $error", "medium": "$warning", "low": "$success"}


def countdown(gate: v.GateView, now: float, after_policy: str, *, watcher: bool = False) -> str:
    """'veto in 42s' when a timeout applies, else who decides (a watcher is not asked)."""
    if gate.timeout_s is None:
        if gate.policy != "ask":
            return gate.policy
        return "waits for a decision" if watcher else "waits for you"
    left = max(0, int(round(gate.raised_ts + gate.timeout_s - now)))
    action = gate.policy if gate.policy in ("approve", "veto") else after_policy
    return f"{action} in {left}s"


class GatesPanel(Vertical):
    DEFAULT_CSS = """
    GatesPanel {
        height: auto;
        max-height: 10;
        background: $surface;
        border-top: solid $panel;
    }
    GatesPanel.-waiting {
        border-top: solid $warning 70%;
    }
    GatesPanel > .gates-title {
        padding: 0 1;
        color: $text-muted;
    }
    GatesPanel.-waiting > .gates-title {
        color: $warning;
        text-style: bold;
    }
    GatesPanel > DataTable {
        height: auto;
        max-height: 8;
        background: $surface;
    }
    """

    class GateChosen(Message):
        """Enter on a gate: open its prompt."""

        def __init__(self, gate_id: str) -> None:
            super().__init__()
            self.gate_id = gate_id

    class RowMoved(Message):
        """The highlighted row changed: what a and v act on while the table has focus."""

    def __init__(
        self, *, clock: Callable[[], float], replay: bool = False, read_only: bool = False, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self._clock = clock
        self._replay = replay
        self._read_only = read_only  # a watcher's page: it names the gates, decides none
        self._view: v.RunView = v.EMPTY_VIEW
        self._gates: tuple[v.GateView, ...] = ()
        self._title = Label("no pending gates", classes="gates-title")
        self._table: DataTable = DataTable(cursor_type="row", zebra_stripes=False)
        self._table.display = False

    def compose(self):
        yield self._title
        yield self._table

    def on_mount(self) -> None:
        table = self._table
        table.add_column("gate", key="gate")
        table.add_column("branch", key="branch")
        table.add_column("#", key="attempt")
        table.add_column("undo", key="undo")
        # who decides, and when, before the long move and reason: a countdown that runs
        # out on its own must not sit off the right edge of the panel
        table.add_column("decides", key="countdown")
        table.add_column("move", key="move")
        table.add_column("reason", key="reason")
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
        row = min(max(self._table.cursor_row, 0), len(self._gates) - 1)
        return self._gates[row].gate_id

    @property
    def row_count(self) -> int:
        return len(self._gates)

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
        table = self._table
        if not table.columns:
            return
        keep = self.selected_gate if table.row_count else None
        table.clear()
        waiting = bool(self._gates)
        self.set_class(waiting, "-waiting")
        table.display = waiting
        if not waiting:
            self._title.update("no pending gates")
            return
        n = len(self._gates)
        gates = f"{n} pending gate{'s' if n > 1 else ''}"
        if self._replay:
            self._title.update(f"{gates} at this point of the replay")
        elif self._read_only:
            self._title.update(f"{gates}: waiting for a decision (this view is read-only)")
        else:
            self._title.update(f"{gates}: a approve · v veto · enter or g for the prompt")
        now = self.now()
        for g in self._gates:
            table.add_row(
                Content.styled(g.gate_id, "bold"),
                g.branch_id,
                f"#{g.attempt}",
                Content.styled(g.undo_cost, UNDO_STYLES.get(g.undo_cost, "")),
                countdown(g, now, self._after_policy(), watcher=self._read_only),
                g.move,
                g.reason,
                key=g.gate_id,
            )
        ids = [g.gate_id for g in self._gates]
        if keep in ids:
            table.move_cursor(row=ids.index(keep), animate=False)

    def _tick(self) -> None:
        now = self.now()
        for g in self._gates:
            if g.timeout_s is not None:
                self._table.update_cell(
                    g.gate_id,
                    "countdown",
                    countdown(g, now, self._after_policy(), watcher=self._read_only),
                )

    def select_gate(self, gate_id: str) -> None:
        ids = [g.gate_id for g in self._gates]
        if gate_id in ids:
            self._table.move_cursor(row=ids.index(gate_id), animate=False)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.RowMoved())

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self._gates and event.row_key.value:
            self.post_message(self.GateChosen(str(event.row_key.value)))
