"""The hints editor: what the person wants the next proposals to try or avoid, for the
whole run or for one branch. Dismissed with the new text, or None when cancelled. Below
the text it shows, as the person types, which lines are directives the search obeys
(engine/directives.py) and which are not understood."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static, TextArea

from kernelladder.engine.directives import SYNTAX, directive_lines, parse_directives
from kernelladder.engine.proposers.search import NAME as SEARCH
from kernelladder.engine.proposers.search_steering import directive_vocabulary


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
    HintsEditor #hints-directives {
        height: auto;
        max-height: 6;
        color: $text-muted;
        margin-top: 1;
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

    def __init__(self, scope: str, text: str, *, op: str = "", proposer: str = "") -> None:
        super().__init__()
        self.scope = scope  # "global" or a branch id
        self.text = text
        self.op = op
        self.proposer = proposer

    def directive_report(self, text: str) -> str:
        """What the hints say to the search: directives understood, lines not."""
        families, params = directive_vocabulary(self.op)
        known = {"families": families, "params": params} if families else {}
        lines = directive_lines(
            parse_directives(text, **known), reads_only_directives=self.proposer == SEARCH
        )
        return "\n".join(lines) if lines else f"directives: {SYNTAX}"

    def compose(self) -> ComposeResult:
        where = "every branch" if self.scope == "global" else f"branch {self.scope}"
        with Vertical():
            yield Label(f"Hints for {where}", classes="hints-title")
            yield Label(
                "They go into the next proposals' context; the search obeys only directive "
                "lines. ctrl+s applies, escape cancels.",
                classes="hints-help",
            )
            yield TextArea(self.text, id="hints-text", soft_wrap=True, show_line_numbers=False)
            yield Static(self.directive_report(self.text), id="hints-directives", markup=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Apply (ctrl+s)", id="save", variant="primary")

    def on_mount(self) -> None:
        editor = self.query_one(TextArea)
        if getattr(self.app, "frozen", False):
            editor.cursor_blink = False
        editor.focus()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.query_one("#hints-directives", Static).update(
            self.directive_report(event.text_area.text)
        )

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
