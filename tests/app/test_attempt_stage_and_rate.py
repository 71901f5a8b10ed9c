"""Where the time goes, on screen: the stage a running attempt is in (baselines, compile,
correct, time; profile while a judged one is profiled), in the header of a live run the verified
attempts per minute, and a paused run's branches as waiting with it. Fed from the committed H200 rmsnorm run's log, cut while
an attempt runs, plus the progress lines a worker and a profile send."""

from __future__ import annotations

from dataclasses import replace

from helpers import H200_RUNS

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.app.folding import build_view
from kernelladder.app.widgets.run_header import status_line
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold

RUN = H200_RUNS / "rmsnorm-search"


def _running() -> tuple[list[ev.Event], int]:
    """The log up to the first attempt's start (it runs), and that attempt."""
    events = read_events(RUN)
    i = next(k for k, e in enumerate(events) if isinstance(e, ev.AttemptStarted))
    return events[: i + 1], events[i].attempt


def _with(events: list[ev.Event], *more: ev.Event) -> v.RunView:
    last = events[-1]
    stamped = [replace(e, seq=last.seq + 1 + k, ts=last.ts + 1 + k) for k, e in enumerate(more)]
    return build_view(fold([*events, *stamped]))


def test_a_running_attempt_shows_the_stage_it_is_in():
    events, n = _running()
    assert _with(events).attempts[n].stage == ""  # started, no progress yet
    steps = (
        ("baselines", "baselines"),  # a worker's first: torch.compile's baselines compiled
        ("compile", "compile"),
        ("correctness", "correct"),
        ("speed", "time"),
    )
    for gate, stage in steps:
        a = _with(events, ev.AttemptProgress(attempt=n, gate=gate, message="...")).attempts[n]
        assert a.stage == stage
        assert fmt.attempt_result(a, True) == f"running: {stage}"


def test_a_judged_attempt_shows_profile_until_its_profile_is_ready():
    events = read_events(RUN)
    verdict = next(e for e in events if isinstance(e, ev.VerdictReady) and e.verdict == "pass")
    upto = events[: events.index(verdict) + 1]
    profiling = ev.AttemptProgress(attempt=verdict.attempt, gate="profile", message="replaying")
    a = _with(upto, profiling).attempts[verdict.attempt]
    assert a.stage == "profile"
    # the tree says so after its result: its branch has gone on to other attempts
    assert fmt.attempt_result(a, True).endswith("× · profiling")  # its speedup, then this
    ready = ev.ProfileReady(attempt=verdict.attempt, status="ok", reason="new best")
    a = _with(upto, profiling, ready).attempts[verdict.attempt]
    assert a.stage == "" and "profiling" not in fmt.attempt_result(a, True)
    # a profile a forced stop cancelled never reports: the ended run does not say profiling
    ended = ev.RunFinished(reason="user", detail="stopped")
    assert _with(upto, profiling, ended).attempts[verdict.attempt].stage == ""


def test_the_header_of_a_live_run_shows_attempts_per_minute():
    events, _ = _running()
    view = replace(_with(events), attempts_judged=12)
    assert view.live
    assert "attempts 1/40 · 12.0/min" in status_line(view, 60.0).plain
    assert "/min" not in status_line(view, 3.0).plain  # too early to say
    finished = replace(view, state=v.RUN_FINISHED)
    assert "/min" not in status_line(finished, 60.0).plain
    # a short line leaves the rate out first
    narrow = status_line(view, 60.0, 60).plain
    assert "/min" not in narrow and "attempts 1/40" in narrow


def test_a_running_branch_of_a_paused_run_says_it_waits_with_the_run():
    events, _ = _running()
    running = _with(events)
    assert [fmt.branch_status(b) for b in running.branches] == ["running"] * 3
    paused = _with(events, ev.RunPaused(by="user"))
    assert paused.state == v.RUN_PAUSED
    assert [fmt.branch_status(b) for b in paused.branches] == ["paused with the run"] * 3
    resumed = _with(events, ev.RunPaused(by="user"), ev.RunResumed(by="user"))
    assert [fmt.branch_status(b) for b in resumed.branches] == ["running"] * 3
