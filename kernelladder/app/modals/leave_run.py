"""Quitting an app attached to a run another process owns: detach (the run goes on),
stop the run and quit, or keep watching. Dismissed with "detach", "stop" or None."""

from __future__ import annotations

import shlex

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label

from kernelladder.app.modals.dialog import BODY, TITLE, Dialog

DETACH, STOP = "detach", "stop"


class LeaveRunScreen(Dialog[str | None]):
    DEFAULT_CSS = """
    LeaveRunScreen > Vertical {
        width: 70;
        border: thick $accent 80%;
    }
    """
    BINDINGS = [
        Binding("escape", "leave(None)", "Keep watching", id="leave.cancel"),
        Binding("d", "leave('detach')", "Detach", id="leave.detach"),
        Binding("s", "leave('stop')", "Stop and quit", id="leave.stop"),
    ]

    def __init__(self, owner: str, run_dir: str = "RUN_DIR") -> None:
        super().__init__()
        self.owner = owner  # who runs it, e.g. "pid 4242 on gpu-box"
        self.run_dir = run_dir  # the command to attach again names it

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Leave the run?", classes=TITLE)
            with VerticalScroll(classes=BODY):
                yield Label(
                    f"The run belongs to another process ({self.owner}). Detach (d) leaves it "
                    "running: attach again with kernelladder-tui --attach "
                    f"{shlex.quote(self.run_dir)}. Stop and "
                    "quit (s) stops it: in-flight attempts finish and are recorded."
                )
            with Horizontal():
                yield Button("Keep watching", id="cancel")
                yield Button("Stop and quit", id=STOP, variant="warning")
                yield Button("Detach", id=DETACH, variant="primary")

    def on_mount(self) -> None:
        self.query_one(f"#{DETACH}", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id if event.button.id in (DETACH, STOP) else None)

    def action_leave(self, choice: str | None) -> None:
        self.dismiss(choice)
