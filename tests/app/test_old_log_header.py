"""The app's header on a log recorded before verdicts carried vs best
(examples/h200-attention-search of 2026-11-30, kept in tests/data/old-logs: an H200 run slower than cuDNN's attention at both large
shapes): it leads with vs best, computed from the saved verdicts, not with the 14x over
the naive reference."""

from __future__ import annotations

from helpers import DATA

from kernelladder.cli.replay import read_run_log
from kernelladder.engine.record.state import fold

ATTENTION = DATA / "old-logs" / "attention-2026-11-30"


def test_the_apps_header_leads_with_vs_best_on_an_old_log():
    from kernelladder.app.folding import build_view
    from kernelladder.app.widgets.run_header import status_line

    view = build_view(fold(read_run_log(ATTENTION).events))
    assert view.best_attempt == 1 and view.best_versus == "sdpa"
    line = status_line(view, 0.0, 200).plain
    best = line.index("#1 0.99x vs sdpa")
    assert line.index("2 faster 2 slower") > best
    assert line.index("(14.05× over reference)") > best
    assert "14.05" not in line[:best]


def test_the_tree_and_the_sparklines_lead_with_vs_best_on_an_old_log():
    from kernelladder.app import format as fmt
    from kernelladder.app.folding import build_view
    from kernelladder.app.widgets.branch_trends import trends_heading

    view = build_view(fold(read_run_log(ATTENTION).events))
    assert fmt.attempt_result(view.attempts[1], True) == "0.99× vs best"
    assert fmt.standing_marks(view.attempts[1]) == "▼▼▲▲"
    assert trends_heading(view) == "per-branch vs best"
