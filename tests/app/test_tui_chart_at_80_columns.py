"""The chart, the per-branch trends and the attempt's tabs on an 80x24 terminal, drawn
from a committed H200 run that records vs best (tests/data/h200-runs/rmsnorm-standing): every
tab's name shows whole, the chart spreads its points over its rows instead of one, the
label of the baseline to beat is never drawn over a point, and each branch's sparkline
says the range of its own scale."""

from __future__ import annotations

from helpers import H200_RUNS, replay_app

from kernelladder.app.widgets.branch_trends import BranchTrend, trend_range
from kernelladder.app.widgets.speedup_chart import (
    BEST,
    KEY_TO_FLOOR,
    POINT,
    ChartData,
    ChartPoint,
    draw,
    fit_title,
)

STANDING_RUN = H200_RUNS / "rmsnorm-standing"


def _plot_rows(rows):
    """The plot's rows as text, without the title, the gutter and the axis rows."""
    return ["".join(text for text, _ in row)[8:] for row in rows[1:-2]]


async def test_at_80x24_every_tab_shows_and_the_chart_spreads_its_points():
    app = replay_app(STANDING_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.5)
        tabs = app.main.query_one("#attempt-tabs")
        labels = [str(tab.label) for tab in tabs.query("Tab")]
        assert labels[-2:] == ["Profile", "Deploy"], labels
        last = [tab for tab in tabs.query("Tab") if str(tab.label) == "Deploy"][0]
        assert last.region.right <= app.main.query_one("#attempt-panel").region.right
        chart = app.main.screen_state()["chart"]
        plot = [line for line in chart[1:] if "┤" in line or "│" in line]
        with_points = [line for line in plot if POINT in line]
        assert len(with_points) >= 2, "\n".join(chart)
        ranges = [str(row._range.render()) for row in app.main.query(BranchTrend)]
        assert len(ranges) == 3 and all("-" in r and r.endswith("×") for r in ranges), ranges


def test_a_wide_noise_band_or_a_far_target_does_not_squash_the_points():
    points = tuple(ChartPoint(n, 0, 1.0 + n / 100) for n in range(1, 8))
    data = ChartData(
        points=points, last_attempt=7, target=3.0, band=(0.6, 1.6), title="t",
        measured=True, series="vs best", baseline=1.0,
    )  # fmt: skip
    rows = _plot_rows(draw(data, 60, 7))
    assert len([r for r in rows if POINT in r]) >= 2, "\n".join(rows)


def test_the_baseline_label_never_hides_a_point():
    # points along the baseline, and one exactly where the label would go
    points = tuple(ChartPoint(n, 0, 1.0) for n in range(1, 40, 3)) + (ChartPoint(38, 0, 1.0),)
    data = ChartData(
        points=points, last_attempt=40, target=None, band=None, title="t", measured=True,
        series="vs best", baseline=1.0,
    )  # fmt: skip
    rows = _plot_rows(draw(data, 70, 10))
    drawn = sum(r.count(POINT) for r in rows)
    columns = {round((p.attempt - 1) / 39 * 60) for p in points}
    assert drawn == len(columns), "\n".join(rows)
    labelled = [r for r in rows if "the baseline to beat" in r]
    assert labelled, "\n".join(rows)
    at = labelled[0].index("the baseline to beat")
    assert POINT not in labelled[0][at - 1 : at + 21] and BEST not in labelled[0][at : at + 20]


def test_a_label_off_the_baselines_row_points_at_it():
    """At 80x24 the plot has three rows: with the 1.00 row full of points the label goes
    to a neighbouring row, whose tick names another value (1.11x): an arrow says where
    the baseline is, so the label does not name the best-so-far line it sits beside."""
    points = tuple(ChartPoint(n, 0, 1.0) for n in range(1, 41)) + (ChartPoint(40, 1, 1.1),)
    data = ChartData(
        points=points, last_attempt=40, target=None, band=None, title="t", measured=True,
        series="vs best", baseline=1.0,
    )  # fmt: skip
    rows = ["".join(text for text, _ in row) for row in draw(data, 44, 5)]
    at = next(i for i, r in enumerate(rows) if "the baseline to beat" in r)
    base = next(i for i, r in enumerate(rows) if "1.00×" in r)
    assert at != base, "\n".join(rows)
    arrow = "↓" if at < base else "↑"
    assert f"{arrow} the baseline to beat" in rows[at], "\n".join(rows)


def test_each_branch_trend_says_its_own_range():
    assert trend_range((1.012, 1.071, 1.04)) == "1.01-1.07×"
    assert trend_range((8.2, 8.2)) == "8.20×"
    assert trend_range(()) == ""


def test_a_long_title_is_cut_in_its_middle_and_keeps_the_key_that_switches_the_series():
    title = (
        " vs best · #22 1.07x vs torch.compile (b1) · 3 faster 2 tie · 8.14× over reference"
        + KEY_TO_FLOOR
    )
    assert fit_title(title, len(title)) == title
    cut = fit_title(title, 60)
    assert len(cut) == 60 and cut.endswith("… · F: floor") and cut.startswith(" vs best · #22")
    assert fit_title(title, 12) == " vs best · …"  # too narrow for the key: cut at the end
    rows = draw(ChartData(points=[], last_attempt=0, target=None, band=None, title=title,
                          measured=True), 70, 10)  # fmt: skip
    assert "".join(t for t, _ in rows[0]).endswith("F: floor")


def test_the_floor_charts_axis_is_in_percent_as_its_title():
    """Before: the floor series read 1.04× 1.00× 0.98× under a title in %."""
    points = tuple(ChartPoint(n, 0, 0.9 + n / 100) for n in range(1, 8))
    data = ChartData(points=points, last_attempt=7, target=None, band=None, title="floor",
                     measured=True, series="floor", baseline=1.0)  # fmt: skip
    ticks = ["".join(t for t, _ in row)[:8] for row in draw(data, 60, 10)[1:-2]]
    labelled = [t for t in ticks if "┤" in t]
    assert labelled and all(t.strip().endswith("%┤") for t in labelled), ticks
    assert "   100%┤" in labelled


def test_a_point_above_and_a_point_below_the_baseline_never_share_its_row():
    """Before: on a 3-row plot 0.89× and 1.04× were both drawn on the 1.00× row."""
    points = (ChartPoint(1, 0, 0.89), ChartPoint(2, 1, 1.04), ChartPoint(3, 0, 1.5),
              ChartPoint(4, 1, 0.45))  # fmt: skip
    data = ChartData(points=points, last_attempt=4, target=None, band=None, title="t",
                     measured=True, series="vs best", baseline=1.0)  # fmt: skip
    rows = draw(data, 40, 6)  # title, 3 plot rows, the axis and its numbers
    plot = ["".join(text for text, _ in row) for row in rows[1:-2]]
    baseline = next(i for i, line in enumerate(plot) if "1.00×" in line)
    above = [i for i, line in enumerate(plot) if POINT in line[8:] and i < baseline]
    below = [i for i, line in enumerate(plot) if POINT in line[8:] and i > baseline]
    assert POINT not in plot[baseline][8:], "\n".join(plot)
    assert above and below, "\n".join(plot)


async def test_a_replay_before_the_runs_first_event_does_not_say_no_gpu():
    """Before: a replay at event 0 said "speed not measured (no GPU)" of an H100 run."""
    from helpers import H100_RUNS

    from kernelladder.app.app import KernelLadderApp
    from kernelladder.app.replay import load_events

    run_dir = H100_RUNS / "softmax-search"
    app = KernelLadderApp(events=load_events(run_dir), run_dir=run_dir, frozen=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("p", "home")
        await pilot.pause(0.3)
        assert app.player.position == 0
        shown = "\n".join(app.main.screen_state()["chart"])
        trends = str(app.main.query_one(".trends-note").render())
        assert "no GPU" not in shown + trends, shown + trends
        assert "the run has not started at this point" in shown
