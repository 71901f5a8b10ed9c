"""Tokens are shown wherever the cost is: an unpriced model (a local vLLM) costs $0.00
and is bounded by --budget-tokens, so a person must see what it used. The app's header,
an attempt's log line, the progress panel and the finish line (`replay` prints the
panel); a run that asked no model shows no token count."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from kernelladder.app.folding import build_view, log_line
from kernelladder.app.headless import event_line, render_state
from kernelladder.app.widgets.run_header import status_line
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import fold


def run_events(budget_tokens: int | None = 50_000, failed_tokens: int = 700) -> list[ev.Event]:
    settings = {"max_attempts": 10, "budget_tokens": budget_tokens}
    events = [
        ev.RunStarted(run_id="r", op="rmsnorm", proposer="openai", model="m", device="cpu",
                      settings=settings),
        ev.BranchOpened(branch_id="b1", strategy="s"),
        ev.ProposalReceived(branch_id="b1", attempt=1, parent_attempt=None, source_hash="h",
                            strategy="s", move="m", undo_cost="low", undo_reason="r",
                            proposer="openai", model="m", tokens_in=3000, tokens_out=700,
                            cost_usd=0.0123),
        ev.ProposalFailed(branch_id="b1", error="the reply has no ```python code block",
                          tokens_in=3000, tokens_out=failed_tokens),
        ev.RunFinished(reason=ev.RULE_BUDGET_TOKENS, detail="used 7,400 of 5,000 tokens"),
    ]  # fmt: skip
    return [replace(e, seq=i, ts=1000.0 + i) for i, e in enumerate(events)]


def test_the_header_panel_log_and_finish_line_say_the_tokens():
    events = run_events()
    state = fold(events)
    assert state.tokens_in + state.tokens_out == 7_400  # the rejected reply's too
    header = status_line(build_view(state), 30.0).plain
    assert "cost $0.01 · 7,400/50.0k tok" in header, header
    console = Console(width=200, record=True)
    console.print(render_state(state, recorded=True))
    assert "cost $0.01  tokens 7,400/50,000" in console.export_text()
    finish = event_line(events[-1], state)
    assert finish.endswith("; tokens 7,400 (6,000 in, 1,400 out), cost $0.01"), finish
    _, line = log_line(events[2], 1000.0)
    assert line.endswith("(undo low: r, 3,700 tokens, $0.0123)"), line


def test_a_run_that_asked_no_model_shows_no_tokens():
    events = [e for e in run_events(budget_tokens=None) if not hasattr(e, "tokens_in")]
    events[-1] = replace(events[-1], reason=ev.RULE_MAX_ATTEMPTS, detail="")
    state = fold(events)
    assert " tok" not in status_line(build_view(state), 30.0).plain
    assert "tokens" not in event_line(events[-1], state)
