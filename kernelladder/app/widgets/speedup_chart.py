"""Speedup over attempts, drawn with box and block characters through the line API.

Where the log records vs best, each passing attempt is plotted at its geomean speedup
over the fastest library baseline per shape, with the 1.0 line "the baseline to beat";
`F` switches to the fraction of the floor (largest shape). Older logs plot the speedup
over the reference, as they did. Each branch's best-so-far is a line, the target a
dashed line, the noise band around the best shaded. The chart redraws at most twice a
second however fast events arrive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.verifier.contract.verdict import PRACTICAL_MARGIN

REDRAW_EVERY_S = 0.5
BRANCH_COLOURS = 6
GUTTER = 8  # " 12.34×┤"

POINT, BEST, TARGET, BAND, EMPTY = "●", "─", "┄", "░", " "
BASELINE = "╌"  # the 1.0 line: the fastest library baseline, the one to beat
SERIES_VS_BEST, SERIES_FLOOR, SERIES_REFERENCE = "vs best", "floor", "over reference"
# the key that switches the series, last in the title and kept when the title is cut
KEY_TO_FLOOR, KEY_TO_VS_BEST = " · F: floor", " · F: vs best"


@dataclass(frozen=True)
class ChartPoint:
    attempt: int
    branch: int  # index into the branch colours
    speedup: float


@dataclass(frozen=True)
class ChartData:
    points: tuple[ChartPoint, ...]
    last_attempt: int
    target: float | None
    band: tuple[float, float] | None  # noise band around the best speedup
    title: str
    measured: bool
    series: str = SERIES_REFERENCE
    baseline: float | None = None  # a line drawn at this value, labelled "the baseline to beat"
    started: bool = True  # a replay before the run's first event knows nothing of the GPU


def _value(a: v.AttemptView, series: str) -> float | None:
    if series == SERIES_VS_BEST:
        return a.vs_best
    if series == SERIES_FLOOR:
        return a.floor_fraction
    return a.speedup


def chart_data(view: v.RunView, series: str = SERIES_VS_BEST) -> ChartData:
    """The chart of `series` (vs best or floor) where the log records vs best; the
    speedup over the reference for older logs."""
    by_standing = any(a.vs_best is not None for a in view.attempts.values())
    if not by_standing:
        return _reference_chart(view)
    order = {b.branch_id: i % BRANCH_COLOURS for i, b in enumerate(view.branches)}
    points = tuple(
        ChartPoint(n, order.get(a.branch_id, 0), value)
        for n, a in sorted(view.attempts.items())
        if a.passed and (value := _value(a, series)) is not None
    )
    best = view.attempts.get(view.best_attempt) if view.best_attempt is not None else None
    value = _value(best, series) if best is not None else None
    band = None
    if value is not None and best is not None and best.noise and series == SERIES_VS_BEST:
        band = (value * (1 - best.noise), value * (1 + best.noise))
    over = (view.settings or {}).get("target_over", "reference")
    target = view.target if series == SERIES_VS_BEST and over == "best" else None
    if series == SERIES_FLOOR:
        title, key = "fraction of the floor (largest shape)", KEY_TO_VS_BEST
        if best is not None and value is not None:
            title = f"floor · best #{best.number} at {fmt.percent(value)}"
    elif best is not None and best.vs_best is not None:
        title, key = (
            (
                f"vs best · #{best.number} {best.vs_best:.2f}x vs {view.best_versus or 'best'}"
                f" ({view.best_branch})"
                + (f" · {view.best_standing}" if view.best_standing else "")
                + f" · {fmt.speedup(best.speedup)} over reference"
            ),
            KEY_TO_FLOOR,
        )
    else:
        title, key = "vs best · no passing attempt with a speed yet", ""
    if target is not None:
        title += f" · target {fmt.speedup(target)}"
    title += key
    return ChartData(
        points=points,
        last_attempt=max(view.attempts, default=0),
        target=target,
        band=band,
        title=title,
        measured=view.speed_measured,
        series=series,
        baseline=1.0,
        started=bool(view.op),
    )


def _reference_chart(view: v.RunView) -> ChartData:
    order = {b.branch_id: i % BRANCH_COLOURS for i, b in enumerate(view.branches)}
    points = tuple(
        ChartPoint(n, order.get(a.branch_id, 0), a.speedup)
        for n, a in sorted(view.attempts.items())
        if a.passed and a.speedup is not None
    )
    best = view.attempts.get(view.best_attempt) if view.best_attempt is not None else None
    band = None
    if best is not None and best.speedup is not None and best.noise:
        band = (best.speedup * (1 - best.noise), best.speedup * (1 + best.noise))
    if view.best_attempt is not None and view.best_speedup is not None:
        title = (
            f"best {fmt.speedup(view.best_speedup)} #{view.best_attempt} ({view.best_branch})"
            f" · {fmt.percent(view.best_floor_fraction)} of floor"
        )
    else:
        title = "no passing attempt with a speed yet"
    title += f" · target {fmt.speedup(view.target, unmeasured='none')}"
    return ChartData(
        points=points,
        last_attempt=max(view.attempts, default=0),
        target=view.target,
        band=band,
        title=title,
        measured=view.speed_measured,
        started=bool(view.op),
    )


class SpeedupChart(Widget):
    COMPONENT_CLASSES = {
        "speedup-chart--title",
        "speedup-chart--axis",
        "speedup-chart--target",
        "speedup-chart--band",
        "speedup-chart--baseline",
        "speedup-chart--note",
        *(f"speedup-chart--branch-{i}" for i in range(BRANCH_COLOURS)),
    }
    DEFAULT_CSS = """
    SpeedupChart {
        height: 40%;  /* a short terminal keeps rows for the selected attempt below */
        min-height: 7;
        max-height: 12;
        background: $surface;
        border-bottom: solid $panel;
    }
    SpeedupChart.-unmeasured {
        height: 3;  /* no speed on this machine: only the note, room for the attempt */
        min-height: 3;
    }
    SpeedupChart > .speedup-chart--title { color: $foreground; text-style: bold; }
    SpeedupChart > .speedup-chart--axis { color: $foreground-muted; }
    SpeedupChart > .speedup-chart--target { color: $error; }
    SpeedupChart > .speedup-chart--band { color: $primary 40%; }
    SpeedupChart > .speedup-chart--baseline { color: $warning; }
    SpeedupChart > .speedup-chart--note { color: $warning; }
    SpeedupChart > .speedup-chart--branch-0 { color: $primary; }
    SpeedupChart > .speedup-chart--branch-1 { color: $accent; }
    SpeedupChart > .speedup-chart--branch-2 { color: $success; }
    SpeedupChart > .speedup-chart--branch-3 { color: $secondary; }
    SpeedupChart > .speedup-chart--branch-4 { color: $warning; }
    SpeedupChart > .speedup-chart--branch-5 { color: $error; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._data: ChartData | None = None
        self._pending: v.RunView | None = None
        self._view: v.RunView | None = None
        self._drawn_at = 0.0
        self._rows: list[list[tuple[str, str]]] = []
        self._rows_for: tuple | None = None
        self.series = SERIES_VS_BEST  # where the log records vs best; F switches to floor
        self.redraws = 0

    def on_mount(self) -> None:
        self.set_interval(REDRAW_EVERY_S, self._tick, name="chart-redraw")

    def show(self, view: v.RunView, *, immediate: bool = False) -> None:
        self._pending = view
        if immediate or self._data is None or time.monotonic() - self._drawn_at >= REDRAW_EVERY_S:
            self._tick()

    def toggle_series(self) -> str:
        """vs best <-> floor fraction; returns the series now shown."""
        self.series = SERIES_FLOOR if self.series == SERIES_VS_BEST else SERIES_VS_BEST
        if self._view is not None:
            self._pending = self._view
            self._tick()
        return self.series

    def _tick(self) -> None:
        if self._pending is None:
            return
        self._view = self._pending
        data = chart_data(self._pending, self.series)
        self._pending = None
        self.set_class(not data.measured, "-unmeasured")
        self._drawn_at = time.monotonic()
        if data != self._data:
            self._data = data
            self.redraws += 1
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows_for = None  # theme changed: the cached rows hold old styles

    # --- drawing -------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        rows = self._layout(self.size)
        if y >= len(rows):
            return Strip.blank(self.size.width, self.rich_style)
        base = self.rich_style
        segments = [
            Segment(text, base + self._style(key) if key else base) for text, key in rows[y]
        ]
        return Strip(segments).adjust_cell_length(self.size.width, base)

    def _style(self, key: str) -> Style:
        return self.get_component_rich_style(f"speedup-chart--{key}", partial=True)

    def _layout(self, size: Size) -> list[list[tuple[str, str]]]:
        key = (self._data, size.width, size.height)
        if key == self._rows_for:
            return self._rows
        self._rows = draw(self._data, size.width, size.height)
        self._rows_for = key
        return self._rows


def fit_title(title: str, width: int) -> str:
    """The title in `width` cells: cut in its middle (…) so the key that switches the
    series (" · F: floor") stays whole at its end; cut at the end when even that is
    too wide."""
    if len(title) <= width:
        return title
    for key in (KEY_TO_FLOOR, KEY_TO_VS_BEST):
        if title.endswith(key) and width > len(key) + 8:
            return title[: width - len(key) - 1] + "…" + key
    return title[: max(0, width - 1)] + "…" if width > 1 else title[:width]


def draw(data: ChartData | None, width: int, height: int) -> list[list[tuple[str, str]]]:
    """The chart as rows of (text, style key) runs; pure, so it is tested alone."""
    if data is None or height < 1 or width < 1:
        return []
    head = "" if data.series != SERIES_REFERENCE else "speedup · "
    rows: list[list[tuple[str, str]]] = [[(fit_title(f" {head}{data.title}", width), "title")]]
    plot_h = height - 3  # title above, axis and attempt numbers below
    plot_w = width - GUTTER - 1
    if not data.measured or not data.points or plot_h < 2 or plot_w < 4:
        if not data.started:
            note = "the run has not started at this point"
        elif not data.measured:
            note = "speed not measured (no GPU): the chart fills in when a GPU verifies"
        else:
            note = "no passing attempt with a speed yet"
        at = max(0, plot_h // 2)
        for i in range(height - 1):
            rows.append([(note.center(width)[:width], "note")] if i == at else [])
        return rows

    lo, hi = value_range(data)
    last = max(data.last_attempt, max(p.attempt for p in data.points), 2)

    def row_of(s: float) -> int:
        return round((hi - s) / (hi - lo) * (plot_h - 1))

    base = data.baseline
    baseline_at = row_of(base) if base is not None else None

    def beyond(s: float) -> bool:  # off the baseline by more than a tie
        return bool(base) and abs(s / base - 1) > PRACTICAL_MARGIN  # type: ignore[operator]

    # on a plot of a few rows 0.89 and 1.04 both rounded onto the 1.00 row: when values
    # of both sides of the baseline share its row, each is drawn on its own side
    shared = [p.speedup for p in data.points if row_of(p.speedup) == baseline_at]
    split = (
        base is not None
        and any(x < base and beyond(x) for x in shared)
        and any(x > base and beyond(x) for x in shared)
    )

    def point_row(s: float) -> int:
        r = row_of(s)
        if split and r == baseline_at and beyond(s):
            r = min(plot_h - 1, r + 1) if s < base else max(0, r - 1)  # type: ignore[operator]
        return r

    def col_of(n: int) -> int:
        return round((n - 1) / (last - 1) * (plot_w - 1))

    grid: list[list[tuple[str, str]]] = [[(EMPTY, "")] * plot_w for _ in range(plot_h)]
    if data.band is not None:
        top, bottom = row_of(data.band[1]), row_of(data.band[0])
        for r in range(max(0, top), min(plot_h, bottom + 1)):
            grid[r] = [(BAND, "band")] * plot_w
    baseline_row: int | None = None
    if data.baseline is not None and lo <= data.baseline <= hi:
        baseline_row = row_of(data.baseline)
        grid[baseline_row] = [(BASELINE, "baseline")] * plot_w
    if data.target is not None and lo <= data.target <= hi:
        r = row_of(data.target)
        if grid[r][0][0] == BAND:
            # target inside the noise band: show both, alternating
            grid[r] = [(TARGET, "target") if c % 2 else (BAND, "band") for c in range(plot_w)]
        else:
            grid[r] = [(TARGET, "target")] * plot_w
    # Best so far per branch: a step line from its first point on.
    best: dict[int, float] = {}
    by_col: dict[int, list[ChartPoint]] = {}
    for p in data.points:
        by_col.setdefault(col_of(p.attempt), []).append(p)
    for c in range(plot_w):
        for p in by_col.get(c, ()):
            best[p.branch] = max(best.get(p.branch, p.speedup), p.speedup)
        for branch, s in best.items():
            grid[point_row(s)][c] = (BEST, f"branch-{branch}")
    for c, ps in by_col.items():
        for p in ps:
            grid[point_row(p.speedup)][c] = (POINT, f"branch-{p.branch}")
    if baseline_row is not None:
        label = " the baseline to beat " if data.series == SERIES_VS_BEST else " the floor "
        _label_line(grid, baseline_row, label)

    ticks = {0: hi, plot_h - 1: lo, (plot_h - 1) // 2: (hi + lo) / 2}
    if data.baseline is not None and lo <= data.baseline <= hi:
        ticks[row_of(data.baseline)] = data.baseline
    if data.target is not None and lo <= data.target <= hi:
        ticks[row_of(data.target)] = data.target

    def tick(value: float) -> str:  # the floor's axis in %, as its title
        return f"{100 * value:6.0f}%┤" if data.series == SERIES_FLOOR else f"{value:6.2f}×┤"

    for r in range(plot_h):
        label = tick(ticks[r]) if r in ticks else " " * (GUTTER - 1) + "│"
        rows.append([(label, "axis"), (" ", ""), *_runs(grid[r])])
    axis = " " * (GUTTER - 1) + "└" + "─" * plot_w
    last_label = f"#{last}"
    axis_row = [(axis, "axis")]
    rows.append(axis_row)
    span = plot_w - len(last_label) - 2
    rows.append([(" " * GUTTER + "#1" + " " * max(span, 1) + last_label, "axis")])
    return rows


def value_range(data: ChartData) -> tuple[float, float]:
    """The values the plot spans: the points and the baseline to beat; a target only
    when it is near them (the title names it either way). The noise band is cut to the
    range: a wide band (or a far target) stretched it until every point sat on one row."""
    values = [p.speedup for p in data.points]
    lo, hi = min(values), max(values)
    if data.baseline is not None:
        lo, hi = min(lo, data.baseline), max(hi, data.baseline)
    span = max(hi - lo, 0.02)
    if data.target is not None and lo - span <= data.target <= hi + span:
        lo, hi = min(lo, data.target), max(hi, data.target)
    pad = max((hi - lo) * 0.08, 0.02)
    return max(0.0, lo - pad), hi + pad


def _label_line(grid: list[list[tuple[str, str]]], row: int, label: str) -> None:
    """Write `label` on the baseline's row where no point or best-so-far line is drawn
    (the rightmost such stretch), else on the row below or above it with an arrow to the
    baseline's row (that row's tick names another value); nowhere when no stretch is
    free: a point is never drawn over (the axis still names the 1.00)."""
    for r in (row, row + 1, row - 1):
        if not 0 <= r < len(grid):
            continue
        # off the baseline's row: " the baseline to beat " -> " ↑ the baseline to beat "
        text = label if r == row else f" {'↑' if r > row else '↓'}{label}"
        width = len(grid[r])
        free = [grid[r][c][0] not in (POINT, BEST, TARGET) for c in range(width)]
        run = 0
        for c in range(width - 1, -1, -1):
            run = run + 1 if free[c] else 0
            if run == len(text):
                for i, ch in enumerate(text):
                    grid[r][c + i] = (ch, "baseline")
                return


def _runs(cells: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Merge neighbouring cells of one style into one run."""
    runs: list[tuple[str, str]] = []
    for text, key in cells:
        if runs and runs[-1][1] == key:
            runs[-1] = (runs[-1][0] + text, key)
        else:
            runs.append((text, key))
    return runs
