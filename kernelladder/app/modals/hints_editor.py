"""The hints editor: what the person wants the next proposals to try or avoid, for the
whole run or for one branch. Dismissed with the new text, or None when cancelled."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, TextArea


class HintsEditor(ModalScreen[str | None]):
    DEFAULT_CSS = """
    HintsEditor {
        align: center middle;
    }
    HintsEditor > Vertical {
        width: 90;
        max-width: 100%;
        height: 24;
        max-height: 100%;
        border: thick $accent 80%;
        background: $panel;
        padding: 1 2;
    }
    HintsEditor Vertical > Label {
        width: 1fr;
    }
    HintsEditor .hints-title {
        text-style: bold;
    }
    HintsEditor .hints-help {
        color: $text-muted;
        margin-bottom: 1;
    }
    HintsEditor TextArea {
        height: 1fr;
    }
    HintsEditor Horizontal {
        height: auto;
        margin-top: 1;
        align-horizontal: right;
    }
    HintsEditor Button {
        margin-left: 2;
    }
    """
    BINDINGS = [
        Binding("ctrl+s", "save", "Apply hints", id="hints.save", priority=True),
        Binding("escape", "cancel", "Cancel", id="hints.cancel"),
    ]

    def __init__(self, scope: str, text: str) -> None:
        super().__init__()
        self.scope = scope  # "global" or a branch id
        self.text = text

    def compose(self) -> ComposeResult:
        where = "every branch" if self.scope == "global" else f"branch {self.scope}"
        with Vertical():
            yield Label(f"Hints for {where}", classes="hints-title")
            yield Label(
                "They go into the next proposals' context. ctrl+s applies, escape cancels.",
                classes="hints-help",
            )
            yield TextArea(self.text, id="hints-text", soft_wrap=True, show_line_numbers=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Apply (ctrl+s)", id="save", variant="primary")

    def on_mount(self) -> None:
        editor = self.query_one(TextArea)
        if getattr(self.app, "frozen", False):
            editor.cursor_blink = False
        editor.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)
