"""A scrolling pane that shows one attempt's text (its source, its diff), redrawn only
when what it shows changed."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

NOTHING_SELECTED = "no attempt selected"


class CodePane(VerticalScroll):
    DEFAULT_CSS = """
    CodePane {
        background: $surface;
    }
    CodePane > Static {
        width: auto;
    }
    """
    BODY_ID = "code-body"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: Hashable | None = None

    def compose(self):
        yield Static(NOTHING_SELECTED, id=self.BODY_ID)

    def _show(self, key: Hashable, render: Callable[[], Content | str]) -> None:
        if key == self._shown:
            return
        self._shown = key
        self.query_one(f"#{self.BODY_ID}", Static).update(render())
