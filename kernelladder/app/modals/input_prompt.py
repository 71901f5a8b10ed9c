"""One line of input (a target, a strategy label, a file path), checked before it is
accepted; dismissed with the text, or None when cancelled."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Label

from kernelladder.app.modals.dialog import Dialog

Check = Callable[[str], str | None]  # returns an error line, or None when the text is fine


class InputPrompt(Dialog[str | None]):
    DEFAULT_CSS = """
    InputPrompt > Vertical {
        width: 72;
    }
    InputPrompt .prompt-title {
        text-style: bold;
    }
    InputPrompt .prompt-help {
        color: $text-muted;
        margin-bottom: 1;
    }
    InputPrompt .prompt-error {
        color: $error;
        height: auto;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(
        self,
        title: str,
        help_text: str,
        *,
        value: str = "",
        placeholder: str = "",
        check: Check | None = None,
    ) -> None:
        super().__init__()
        self.title_text = title
        self.help_text = help_text
        self.value = value
        self.placeholder = placeholder
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, classes="prompt-title")
            yield Label(self.help_text, classes="prompt-help")
            yield Input(self.value, placeholder=self.placeholder, id="prompt-input")
            yield Label("", classes="prompt-error", id="prompt-error")

    def on_mount(self) -> None:
        prompt = self.query_one(Input)
        if getattr(self.app, "frozen", False):
            prompt.cursor_blink = False
        prompt.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        error = self.check(event.value) if self.check else None
        if error:
            self.query_one("#prompt-error", Label).update(error)
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
