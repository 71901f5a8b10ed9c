"""One row per branch: its label, a Sparkline of its attempts' vs best (the speedup
over the reference in logs that do not record vs best) and the range it spans. Each
sparkline is drawn to its own branch's scale (lowest to highest of that branch), so the
range is written beside it: bars of two branches are not comparable without it."""

from __future__ import annotations

from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Label, Sparkline

from kernelladder.app import view as v

LABEL_CELLS = 13  # the label column (14) less its gap


def short_label(text: str, width: int) -> str:
    """`text` in `width` cells, an ellipsis where it was cut (never cut mid-word
    silently: 'b2 one-row-pe' read as a strategy name)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def trends_heading(view: v.RunView) -> str:
    """What the sparklines show: vs best (the figure of merit) where the log records it,
    else the speedup over the reference, said as such."""
    if not view.op:  # a replay before the run's first event: nothing is known yet
        return ""
    if not view.speed_measured:
        return "speed not measured (no GPU)"
    if any(a.vs_best is not None for a in view.attempts.values()):
        return "per-branch vs best"
    return "per-branch speedups over reference"


class BranchTrend(Horizontal):
    DEFAULT_CSS = """
    BranchTrend {
        height: 1;
    }
    BranchTrend > Label {
        width: 14;
        color: $text-muted;
    }
    BranchTrend > Sparkline {
        width: 1fr;
        height: 1;
    }
    BranchTrend > Sparkline > .sparkline--max-color {
        color: $success;
    }
    BranchTrend > Sparkline > .sparkline--min-color {
        color: $primary 50%;
    }
    BranchTrend > .trend-note {
        width: 1fr;
        color: $text-muted;
    }
    BranchTrend > .trend-range {
        width: auto;
        color: $text-muted;
        padding-left: 1;
    }
    """

    def __init__(self, branch_id: str, strategy: str) -> None:
        super().__init__(classes="branch-trend")
        self.branch_id = branch_id
        self.strategy = strategy
        self._data: tuple[float, ...] | None = None
        self._sparkline = Sparkline([], summary_function=max)
        self._range = Label("", classes="trend-range")

    def compose(self):
        yield Label(short_label(f"{self.branch_id} {self.strategy}", LABEL_CELLS))
        yield self._sparkline
        yield self._range

    def show(self, speedups: tuple[float, ...]) -> None:
        if speedups != self._data:
            self._data = speedups
            self._sparkline.data = list(speedups)
            self._range.update(trend_range(speedups))


def trend_range(values: tuple[float, ...]) -> str:
    """The scale of one branch's sparkline: "1.01-1.07×" (one figure when flat)."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return f"{lo:.2f}×" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}×"


class BranchTrends(VerticalScroll):
    """Speedup trends per branch; on a machine without a GPU there are none to draw."""

    DEFAULT_CSS = """
    BranchTrends {
        height: auto;
        max-height: 8;
        background: $surface;
        border-top: solid $panel;
    }
    BranchTrends > .trends-note {
        color: $text-muted;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: dict[str, BranchTrend] = {}
        self._measured: str | None = None  # the heading shown

    def compose(self):
        yield Label("", classes="trends-note")

    def show(self, view: v.RunView) -> None:
        heading = trends_heading(view)
        if heading != self._measured:
            self._measured = heading
            self.query_one(".trends-note", Label).update(heading)
        if not view.speed_measured:
            return
        for branch in view.branches:
            row = self._rows.get(branch.branch_id)
            if row is None:
                row = BranchTrend(branch.branch_id, branch.strategy)
                self._rows[branch.branch_id] = row
                self.mount(row)
            # vs best where the log records it (the figure of merit), else the reference
            figures = [
                a.vs_best if a.vs_best is not None else a.speedup
                for n in branch.attempts
                if (a := view.attempts.get(n)) is not None and a.speedup is not None
            ]
            row.show(tuple(x for x in figures if x is not None))

    def reset(self) -> None:
        for row in self._rows.values():
            row.remove()
        self._rows.clear()
        self._measured = None
