"""The hints editor: what the person wants the next proposals to try or avoid, for the
whole run or for one branch. Dismissed with the new text, or None when cancelled. Below
the text it shows, as the person types, which lines are directives the search obeys
(engine/run/directives.py) and which are not understood, read by the engine's one reader
of hints (engine/run/hints.py) with the op's vocabulary. Text with a line not understood is
not applied (it would have no effect anywhere), and unchanged text sends nothing."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Static, TextArea

from kernelladder.app.modals.dialog import Dialog
from kernelladder.engine import DIRECTIVE_SYNTAX as SYNTAX
from kernelladder.engine import SEARCH, directive_lines, op_vocabulary, read_hints, refusal


class HintsEditor(Dialog[str | None]):
    DEFAULT_CSS = """
    HintsEditor > Vertical {
        width: 90;
        height: 24;
        border: thick $accent 80%;
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
    HintsEditor #hints-directives.-refused {
        color: $warning;
    }
    HintsEditor.-tight .hints-help {
        display: none;  /* ctrl+s and escape are on the buttons */
    }
    HintsEditor.-tight #hints-directives {
        max-height: 3;
    }
    """
    BINDINGS = [
        Binding("ctrl+s", "save", "Apply hints", id="hints.save", priority=True),
        Binding("escape", "cancel", "Cancel", id="hints.cancel"),
    ]

    def __init__(
        self, scope: str, text: str, *, op: str = "", op_kind: str = "builtin", proposer: str = ""
    ) -> None:
        super().__init__()
        self.scope = scope  # "global" or a branch id
        self.text = text
        self.op = op
        self.proposer = proposer
        self.vocabulary = op_vocabulary(op, op_kind)

    def directive_report(self, text: str) -> str:
        """What the hints say to the search: directives understood, lines not."""
        lines = directive_lines(
            read_hints(text, self.vocabulary), reads_only_directives=self.proposer == SEARCH
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
        # typing goes after what is there (at the start it ran into the first directive)
        editor.move_cursor(editor.document.end)
        editor.focus()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        report = self.query_one("#hints-directives", Static)
        report.remove_class("-refused")
        report.update(self.directive_report(event.text_area.text))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_save(self) -> None:
        text = self.query_one(TextArea).text
        if refusal(text, self.vocabulary) is not None:  # it would have no effect anywhere
            report = self.query_one("#hints-directives", Static)
            report.update(
                "Not applied: correct or remove what is not understood (a sentence is "
                "free text).\n" + self.directive_report(text)
            )
            report.add_class("-refused")
            return
        if text == self.text:
            self.app.notify("The hints are unchanged: nothing was sent.", timeout=3)
            self.dismiss(None)
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)
