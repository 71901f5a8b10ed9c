"""The strategy graph's filter: `/` opens it, enter keeps it, escape clears it."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding
from textual.widgets import Input

from kernelladder.app.widgets.strategy_tree import StrategyTree


class TreeFilter(Input):
    """`/`: the strategy graph's filter, as in lazygit and k9s; enter keeps it, escape
    clears it."""

    DEFAULT_CSS = """
    TreeFilter {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
    }
    TreeFilter.-shown {
        display: block;
    }
    """
    BINDINGS = [Binding("escape", "clear_filter", "Clear filter", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(placeholder="filter: text of a line (#12, pass, EPT)", **kwargs)

    def action_clear_filter(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.screen.query_one(StrategyTree).focus()
