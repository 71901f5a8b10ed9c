"""A pending gate in full: the move, its undo cost and reason, who decides when; approve
or veto (with a note the proposer will see). Dismissed with the decision or None.

A gate exists to stop a risky move, so the dialog never approves by accident: focus
starts in the note field, Enter there vetoes with the note (an empty note does nothing
but say so), and Approve has its own key (ctrl+a) and button."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Input, Label

from kernelladder.app import view as v
from kernelladder.app.modals.dialog import BODY, TITLE, Dialog
from kernelladder.app.widgets.gates_panel import UNDO_STYLES, countdown


@dataclass(frozen=True)
class GateDecision:
    gate_id: str
    decision: str  # "approve" | "veto"
    note: str = ""


KEYS_LINE = "enter: veto with this note · ctrl+v: veto · ctrl+a: approve · esc: later"
BUTTONS = {  # id -> (label, label on a narrow terminal)
    "later": ("Later (esc)", "Later"),
    "veto": ("Veto (ctrl+v)", "Veto"),
    "approve": ("Approve (ctrl+a)", "Approve"),
}
EMPTY_NOTE_LINE = (
    "Type a note first to veto with enter (ctrl+v vetoes without one, ctrl+a approves)."
)


class GatePrompt(Dialog[GateDecision | None]):
    DEFAULT_CSS = """
    GatePrompt > Vertical {
        width: 84;
        border: thick $warning 80%;
    }
    GatePrompt .gate-countdown {
        color: $warning;
        margin-top: 1;
    }
    GatePrompt Input {
        margin-top: 1;
    }
    GatePrompt .gate-keys {
        color: $text-muted;
    }
    GatePrompt .gate-keys.-warn {
        color: $warning;
    }
    """
    BINDINGS = [
        Binding("escape", "dismiss_prompt", "Later", id="gate.later"),
        Binding("ctrl+a", "decide('approve')", "Approve", id="gate.approve", priority=True),
        Binding("ctrl+v", "decide('veto')", "Veto", id="gate.veto", priority=True),
    ]

    def __init__(
        self, gate: v.GateView, *, now: Callable[[], float], after_policy: str = "veto"
    ) -> None:
        super().__init__()
        self.gate = gate
        self.now = now
        self.after_policy = after_policy

    def compose(self) -> ComposeResult:
        g = self.gate
        with Vertical():
            with VerticalScroll(id="gate-info", classes=BODY):  # a long move or reason scrolls
                yield Label(
                    f"Gate {g.gate_id}: branch {g.branch_id} wants to try attempt #{g.attempt}",
                    classes=TITLE,
                )
                yield Label(Content.assemble(("move    ", "$text-muted"), (g.move, "bold")))
                yield Label(
                    Content.assemble(
                        ("undo    ", "$text-muted"),
                        (g.undo_cost, UNDO_STYLES.get(g.undo_cost, "")),
                        f" — {g.reason}",
                    )
                )
                yield Label(Content.assemble(("policy  ", "$text-muted"), g.policy))
                yield Label(self._countdown(), classes="gate-countdown", id="gate-countdown")
            yield Input(placeholder="why veto? (the proposer sees this note)", id="gate-note")
            yield Label(KEYS_LINE, classes="gate-keys", id="gate-keys")
            with Horizontal():
                yield Button(BUTTONS["later"][0], id="later")
                yield Button(BUTTONS["veto"][0], id="veto", variant="error")
                yield Button(BUTTONS["approve"][0], id="approve", variant="success")

    def on_mount(self) -> None:
        note = self.query_one(Input)
        if getattr(self.app, "frozen", False):
            note.cursor_blink = False
        note.focus()  # never a button: enter on a focused Approve approved by accident
        if self.gate.timeout_s is not None:
            self.set_interval(1.0, self._tick)

    def narrowed(self, narrow: bool) -> None:
        for button in self.query(Button):  # the keys are in the line above the buttons
            button.label = BUTTONS[button.id or ""][1 if narrow else 0]

    def _countdown(self) -> str:
        return f"decides: {countdown(self.gate, self.now(), self.after_policy)}"

    def _tick(self) -> None:
        self.query_one("#gate-countdown", Label).update(self._countdown())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id in ("approve", "veto"):
            self.action_decide(event.button.id)
        else:
            self.action_dismiss_prompt()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.action_decide("veto")
            return
        keys = self.query_one("#gate-keys", Label)
        keys.update(EMPTY_NOTE_LINE)
        keys.add_class("-warn")

    def action_decide(self, decision: str) -> None:
        note = self.query_one(Input).value.strip() if decision == "veto" else ""
        self.dismiss(GateDecision(self.gate.gate_id, decision, note))

    def action_dismiss_prompt(self) -> None:
        self.dismiss(None)
