"""The key map, built from the bindings themselves so it never drifts from them.

The whole dialog scrolls (down, pagedown, end): at 80x24 the map is taller than the
screen, and a table that did not scroll was cut at its "View" section."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from kernelladder.app.modals.dialog import Dialog


def key_label(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    names = {"question_mark": "?", "space": "space", "comma": ",", "full_stop": "."}
    return ", ".join(names.get(k.strip(), k.strip()) for k in binding.key.split(","))


class HelpScreen(Dialog[None]):
    DEFAULT_CSS = """
    HelpScreen > VerticalScroll {
        width: 110;
        max-width: 100%;
        height: auto;
        max-height: 90%;
        border: thick $primary 80%;
        background: $panel;
        padding: 1 2;
        scrollbar-size-vertical: 1;
    }
    HelpScreen VerticalScroll > Label {
        width: 1fr;
    }
    HelpScreen .help-title {
        text-style: bold;
    }
    HelpScreen .help-note {
        color: $text-muted;
        margin-bottom: 1;
    }
    """
    BINDINGS = [
        Binding("escape,question_mark,f1,q", "close", "Close", id="help.close"),
    ]

    def __init__(self, sections: Iterable[tuple[str, Iterable[Binding]]], note: str = "") -> None:
        super().__init__()
        self.sections = [(title, list(bindings)) for title, bindings in sections]
        self.note = note

    @property
    def rows(self) -> list[tuple[str, str, str]]:
        """(key, action, what it does) per binding; a section's title row has only the
        action."""
        rows = []
        for title, bindings in self.sections:
            rows.append(("", title, ""))
            rows.extend((key_label(b), b.description, b.tooltip) for b in bindings)
        return rows

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog"):
            yield Label("KernelLadder keys", classes="help-title")
            yield Label(
                self.note or "Every action is also in the command palette (ctrl+p).",
                classes="help-note",
            )
            yield Static(id="help-keys")

    def on_mount(self) -> None:
        accent = self.app.theme_variables.get("accent", "")
        table = Table(box=None, expand=True, pad_edge=False, show_edge=False)
        table.add_column("key", no_wrap=True, style="bold")
        table.add_column("action", no_wrap=True)
        table.add_column("what it does", ratio=1)  # wraps: never cut at the border
        for key, action, what in self.rows:
            if not key and not what:
                table.add_row("", Text(action, style=f"bold {accent}".strip()), "")
            else:
                table.add_row(key, action, what)
        self.query_one("#help-keys", Static).update(table)
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
