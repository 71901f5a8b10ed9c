"""A yes/no question, dismissed with True or False."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label

from kernelladder.app.modals.dialog import BODY, TITLE, Dialog


class ConfirmScreen(Dialog[bool]):
    DEFAULT_CSS = """
    ConfirmScreen > Vertical {
        border: thick $warning 80%;
    }
    ConfirmScreen .confirm-keys {
        color: $text-muted;
        margin-top: 1;
    }
    """
    BINDINGS = [
        Binding("escape", "answer(False)", "Cancel", id="confirm.cancel"),
        Binding("y", "answer(True)", "Yes", id="confirm.yes", show=False),
        Binding("n", "answer(False)", "No", id="confirm.no", show=False),
    ]

    def __init__(
        self,
        title: str,
        body: str,
        *,
        yes: str = "Yes",
        no: str = "Cancel",
        keys: str = "",
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.title_text = title
        self.body = body
        self.yes = yes
        self.no = no
        self.more_keys = keys  # a key of the caller's own that answers too

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, classes=TITLE)
            with VerticalScroll(classes=BODY):
                yield Label(self.body)
            yield Label(self.keys_line(), classes="confirm-keys", id="confirm-keys")
            with Horizontal():
                yield Button(self.no, id="no")
                yield Button(self.yes, id="yes", variant="warning")

    def keys_line(self) -> str:
        line = f"y: {self.yes.lower()} · n or esc: {self.no.lower()}"
        return f"{line} · {self.more_keys}" if self.more_keys else line

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
