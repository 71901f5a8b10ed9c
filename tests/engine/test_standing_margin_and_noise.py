"""The standing first, a tie inside the practical margin, the geomean's own noise, and a
best that held, on recorded H200 runs (tests/data/old-logs, from examples/ before it was
re-recorded): rmsnorm's #8 lost all 15 rounds at 32768x8192 by 0.25 % and was recorded
"did not hold"; softmax's log was recorded before verdicts carried vs best."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import DATA

from kernelladder.cli.replay import read_run_log
from kernelladder.engine.record import events as ev
from kernelladder.engine.record import standing_rank
from kernelladder.engine.record.log import read_log
from kernelladder.engine.record.state import apply, closest_to_holding, fold, new_state
from kernelladder.engine.record.summary import summarize
from kernelladder.verifier.contract.verdict import (
    PRACTICAL_MARGIN,
    ShapeTiming,
    geomean_noise,
    versus_fastest_baseline,
)
from kernelladder.verifier.worker.speed_gate import paired_result

RMSNORM = DATA / "old-logs" / "rmsnorm-2026-12-01"
SOFTMAX = DATA / "old-logs" / "softmax-2026-11-30"


def _recorded_confirmation(attempt: int) -> ev.BestConfirmed:
    """As the log's line says it, before the upcast (engine/record/upcast.py) reads it as today's."""
    lines = (RMSNORM / "events.jsonl").read_text().splitlines()
    return next(
        e
        for e in (ev.event_from_dict(json.loads(line)) for line in lines)
        if isinstance(e, ev.BestConfirmed) and e.attempt == attempt
    )


def test_fifteen_rounds_lost_by_a_quarter_percent_is_a_tie_under_the_practical_margin():
    recorded = _recorded_confirmation(8)
    row = recorded.shapes["32768x8192 bf16"]
    assert (row["won"], row["lost"], row["standing"]) == (0, 15, "slower")  # as recorded
    assert row["vs_best"] == pytest.approx(0.9976, abs=2e-4)
    paired = {**row, "ratio": row["vs_best"], "verdict": row["standing"]}
    timing = ShapeTiming(
        "32768x8192 bf16", 3.5, 0.254, 0.001, 13.8, 0.254, 1.0, {"torch.compile": 0.2534}, paired
    )
    assert versus_fastest_baseline(0.254, timing.baselines_ms, 0.001, paired)[2] == "tie"
    # the speed gate's own rounds: every one lost by 0.24 %, and still a tie
    rounds = paired_result("torch.compile", [0.2540] * 15, [0.2534] * 15)
    assert (rounds["lost"], rounds["verdict"]) == (15, "tie")
    # beyond the margin the sign test decides, as before
    assert paired_result("torch.compile", [0.2540] * 15, [0.2500] * 15)["verdict"] == "slower"
    assert PRACTICAL_MARGIN == 0.01


def test_the_recorded_did_not_hold_by_a_quarter_percent_folds_as_held():
    state = fold(read_run_log(RMSNORM).events)
    mine = state.confirmations[8]
    assert mine["held"] is True
    assert "within the 1% practical margin" in mine["detail"]
    assert "slower than the fastest baseline at 32768x8192 bf16" in mine["detail"]
    assert mine["shapes"]["32768x8192 bf16"]["standing"] == "tie"
    assert state.best_attempt == 30 and state.confirmations[30]["held"] is True


def _tie_counts(state) -> tuple[int, int]:
    """How many passing attempts tie the run's best: with the noisiest shape's trial
    spread as the ranking noise (before), and with the geomean's own noise (now)."""
    best = state.attempts[state.best_attempt]
    now_best = standing_rank.merit_of(best)
    then_best = dataclasses.replace(now_best, noise=best.noise)
    before = after = 0
    for a in state.attempts.values():
        if a.number == best.number or not a.passed or a.vs_best is None:
            continue
        now = standing_rank.merit_of(a)
        before += standing_rank.ties(then_best, dataclasses.replace(now, noise=a.noise))
        after += standing_rank.ties(now_best, now)
    return before, after


def test_the_geomeans_noise_ranks_softmax_into_fewer_ties_than_the_noisiest_shape():
    state = fold(read_run_log(SOFTMAX).events)
    assert state.best_attempt == 16 and state.passed == 27
    best = state.attempts[16]
    rows = best.standing_shapes
    assert len(rows) == 5 and all(isinstance(r["noise"], float) for r in rows.values())
    assert standing_rank.merit_of(best).noise == pytest.approx(
        geomean_noise([r["noise"] for r in rows.values()])
    )
    assert standing_rank.merit_of(best).noise < best.noise / 2  # 4.1 % against 13.4 %
    assert _tie_counts(state) == (24, 11)  # of its 26 other attempts


def test_the_geomeans_noise_is_the_shapes_noises_combined_as_a_mean():
    assert geomean_noise([0.1, 0.0, 0.0, 0.0]) == pytest.approx(0.025)
    assert geomean_noise([0.03, 0.04]) == pytest.approx(0.025)
    assert geomean_noise([None]) is None


def test_an_old_log_replays_leading_with_vs_best_from_its_saved_verdicts():
    raw = [e for e in read_log(SOFTMAX).events if isinstance(e, ev.VerdictReady)]
    assert all(e.vs_best is None and not e.standing_shapes for e in raw)  # recorded before
    state = new_state()
    finish = None
    for e in read_run_log(SOFTMAX).events:
        apply(state, e)
        if isinstance(e, ev.RunFinished):
            from kernelladder.app.headless import event_line

            finish = event_line(e, state)
    assert finish is not None
    assert finish.endswith("best #16 1.49x vs torch.compile · 5 faster (2.08x over reference)")
    # computed the same way as the live engine: the speed gate's timings per shape
    from kernelladder.engine.record.log import read_attempt_verdict
    from kernelladder.verifier.contract.verdict import Verdict, vs_best

    saved = Verdict.from_dict(read_attempt_verdict(SOFTMAX, 16))
    assert state.attempts[16].vs_best == pytest.approx(vs_best(saved.timings), abs=1e-6)


def _confirmed(attempt: int, vs_best: float, worst: float, seq: int) -> ev.BestConfirmed:
    shapes = {
        "T1 H8 D128": {"baseline": "torch.compile", "vs_best": worst, "standing": "slower"},
        "T4096 H8 D128": {"baseline": "torch.compile", "vs_best": 1.3, "standing": "faster"},
    }
    return ev.BestConfirmed(
        attempt=attempt,
        held=False,
        vs_best=vs_best,
        recorded_vs_best=vs_best,
        shapes=shapes,
        noise=0.02,
        rounds=15,
        detail="slower than the fastest baseline at T1 H8 D128",
        seq=seq,
    )


def test_when_none_held_the_summary_says_so_and_names_the_closest():
    events: list[ev.Event] = [
        ev.RunStarted(run_id="r", op="kv_quant", device="cuda", speed_measured=True, seq=0),
        ev.BranchOpened(branch_id="b1", strategy="s", from_attempt=None, seq=1),
    ]
    seq = 2
    for n in (1, 2, 3):
        events.append(
            ev.ProposalReceived(
                attempt=n, branch_id="b1", parent_attempt=None, strategy="s", move="m",
                undo_cost="low", undo_reason="", source_hash=f"h{n}", proposer="search",
                seq=seq,
            )
        )  # fmt: skip
        seq += 1
    for n in (1, 2, 3):
        events.append(
            ev.VerdictReady(
                attempt=n, branch_id="b1", verdict="pass", verdict_kind="pass", gate=None,
                speedup=20.0, vs_best=1.15, seq=seq,
                standing_shapes={
                    "T1 H8 D128": {"baseline": "torch.compile", "vs_best": 1.0, "standing": "tie"},
                },
            )
        )  # fmt: skip
        seq += 1
    events.append(ev.BestImproved(attempt=1, branch_id="b1", speedup=20.0, overall=True, seq=seq))
    seq += 1
    for n, worst in ((1, 0.96), (2, 0.98), (3, 0.97)):  # slower at T1 by 4, 2, 3 %
        events.append(_confirmed(n, 1.14, worst, seq))
        seq += 1
    state = fold(events)
    assert closest_to_holding(state) == 2
    assert state.best_attempt == 1  # the best by rank stays; none held
    summary = summarize(state)
    assert summary["confirmed_best"] is None
    assert summary["none_held"]["re_measured"] == 3
    assert summary["none_held"]["closest"] == 2
    from kernelladder.app.verdict_report import best_text, confirmation_lines

    assert confirmation_lines(state).startswith(
        "none of the 3 re-measured attempts held; the closest to holding is #2: slower than "
        "the fastest baseline at T1 H8 D128"
    )
    assert "none of 3 re-measured held" in best_text(state)
