"""The key map, built from the bindings themselves so it never drifts from them."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label


def key_label(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    names = {"question_mark": "?", "space": "space", "comma": ",", "full_stop": "."}
    return ", ".join(names.get(k.strip(), k.strip()) for k in binding.key.split(","))


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Vertical {
        width: 110;
        max-width: 100%;
        height: auto;
        max-height: 90%;
        border: thick $primary 80%;
        background: $panel;
        padding: 1 2;
    }
    HelpScreen Vertical > Label {
        width: 1fr;
    }
    HelpScreen .help-title {
        text-style: bold;
    }
    HelpScreen .help-note {
        color: $text-muted;
        margin-bottom: 1;
    }
    HelpScreen DataTable {
        height: auto;
        max-height: 36;
    }
    """
    BINDINGS = [
        Binding("escape,question_mark,f1,q", "close", "Close", id="help.close"),
    ]

    def __init__(self, sections: Iterable[tuple[str, Iterable[Binding]]], note: str = "") -> None:
        super().__init__()
        self.sections = [(title, list(bindings)) for title, bindings in sections]
        self.note = note

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("KernelLadder keys", classes="help-title")
            yield Label(
                self.note or "Every action is also in the command palette (ctrl+p).",
                classes="help-note",
            )
            yield DataTable(cursor_type="none", zebra_stripes=True, id="help-keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("key", "action", "what it does")
        for title, bindings in self.sections:
            table.add_row("", Content.styled(title, "bold $accent"), "")
            for b in bindings:
                table.add_row(key_label(b), b.description, b.tooltip)

    def action_close(self) -> None:
        self.dismiss(None)
