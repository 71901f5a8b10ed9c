"""The app puts the standing first: the header's best, the chart's vs best with the
baseline to beat, the tree's per-shape marks and the verdict tab's per-shape table.

Fed from the committed H200 rmsnorm search as the engine now records it (tests/
standing_logs.py: vs best and the per-shape standing worked out from the run's own
recorded verdicts; the best by standing is #22, where the recorded best by the speedup
over the reference was #5). Older logs show as before (tests/test_tui_snapshots.py).
"""

from __future__ import annotations

from helpers import H200_RUNS, reranked_events

from kernelladder.app import format as fmt
from kernelladder.app.app import KernelLadderApp
from kernelladder.app.folding import build_view
from kernelladder.app.screenshots import SIZE, settle
from kernelladder.app.widgets.run_header import status_line
from kernelladder.app.widgets.speedup_chart import SERIES_FLOOR, chart_data, draw
from kernelladder.engine.record.state import fold

RUN = H200_RUNS / "rmsnorm-search"


def _view():
    return build_view(fold(reranked_events(RUN)))


def test_the_header_leads_with_the_best_by_standing():
    line = status_line(_view(), 86.0).plain
    assert "best #22 1.07x vs torch.compile · 3 faster 2 tie · 103% floor" in line
    assert "(8.14× over reference)" in line
    narrow = status_line(_view(), 86.0, 80).plain
    assert "#22 1.07x vs torch.compile" in narrow and "over reference" not in narrow


def test_the_chart_plots_vs_best_with_the_baseline_to_beat():
    view = _view()
    data = chart_data(view)
    assert data.baseline == 1.0 and data.title.startswith("vs best · #22 1.07x vs torch.compile")
    assert {round(p.speedup, 4) for p in data.points} == {
        round(a.vs_best, 4) for a in view.attempts.values() if a.vs_best is not None
    }
    text = "\n".join("".join(t for t, _ in row) for row in draw(data, 120, 12))
    assert "the base" in text and "1.00×┤" in text  # points are drawn over the label
    floor = chart_data(view, SERIES_FLOOR)
    assert floor.title.startswith("floor · best #22 at 103%")
    assert {p.attempt for p in floor.points} == {p.attempt for p in data.points}


def test_the_tree_shows_vs_best_and_a_mark_per_shape():
    view = _view()
    five, best = view.attempts[5], view.attempts[22]
    assert fmt.attempt_result(five, True) == "1.06× vs best"
    assert fmt.standing_marks(five) == "▼▲▲=▲"  # slower at 32768x8192 against torch.compile
    assert fmt.standing_marks(best) == "=▲▲=▲"


def _app() -> KernelLadderApp:
    return KernelLadderApp(events=reranked_events(RUN), run_dir=RUN, frozen=True, at_end=True)


def test_main_screen_by_standing(snap_compare):
    app = _app()

    async def ready(pilot):
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_verdict_tab_leads_with_the_standing(snap_compare):
    app = _app()

    async def ready(pilot):
        await settle(app, pilot)
        await pilot.press("2")
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


async def test_the_header_shows_the_bests_standing_as_the_end_re_measured_it():
    """Before: the softmax example's header read `4 faster 1 tie`, the verdict's own,
    after the end's re-measure found the best faster at all 5 shapes."""
    from helpers import H100_RUNS, replay_app

    app = replay_app(H100_RUNS / "softmax-search")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        header = app.main.screen_state()["header"]
        assert "5 faster · confirmed" in header and "4 faster 1 tie" not in header, header


async def test_an_attempt_timed_coarsely_says_which_it_was_not_faster_than():
    """Before: the attention example's b3 showed #17 slower nowhere (=▲▲=) beside its best
    #15 (▲▲▲▼) with nothing saying why #15 is the branch's best: #17's timing stopped
    early, not faster than #15."""
    from helpers import H100_RUNS, replay_app

    app = replay_app(H100_RUNS / "attention-search")
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause(0.3)
        line = next(x for x in app.main.screen_state()["tree"] if "#17 " in x)
        assert "coarse, ≤#15" in line, line
