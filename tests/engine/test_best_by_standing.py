"""Best = best standing against the fastest library baseline: the rule (engine/
standing_rank.py), the fold's branch bests and stagnation, --target on vs best, the
summary's vs best and confirmations, the end's re-measure (BestConfirmed) and its skips,
and `optimize --min-speedup` defaulting to 0.

Recorded GPU verdicts: the committed H200 runs under examples/ (their attempts/<n>.json
are the verifier's full verdicts). Engine runs use a runner double (no GPU here, so no
speed exists on this machine): StandingRunner returns verdicts with per-shape timings
against one baseline, scripted in the candidate's source, and says so.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import H200_RUNS, ROOT, ScriptedRunner, make_run, move, reranked_events, until

from kernelladder.engine.protocols import ProposerExhausted
from kernelladder.engine.record import events as ev
from kernelladder.engine.record import standing_rank
from kernelladder.engine.record.log import read_attempt_verdict, read_events
from kernelladder.engine.record.standing_rank import Merit
from kernelladder.engine.record.state import apply, fold, improvement, new_state
from kernelladder.engine.record.summary import summarize
from kernelladder.engine.run import rules
from kernelladder.verifier.contract.verdict import GATES, Feedback, GateResult, ShapeTiming, Verdict

SUMMARIES = ROOT / "tests" / "data" / "replay-summaries"


# --- the rule --------------------------------------------------------------------------------


def test_slower_nowhere_ranks_above_a_higher_vs_best_that_is_slower_somewhere():
    slower_somewhere = Merit(speedup=9.0, vs_best=1.20, shapes={"a": "faster", "b": "slower"})
    slower_nowhere = Merit(speedup=8.0, vs_best=1.01, shapes={"a": "tie", "b": "tie"})
    assert standing_rank.better(slower_nowhere, slower_somewhere)
    assert not standing_rank.better(slower_somewhere, slower_nowhere)
    # among equals: vs best, then the floor fraction
    a = Merit(speedup=1.0, vs_best=1.05, shapes={"a": "tie"}, floor_fraction=0.9)
    b = Merit(speedup=9.0, vs_best=1.04, shapes={"a": "tie"}, floor_fraction=1.0)
    c = Merit(speedup=1.0, vs_best=1.05, shapes={"a": "tie"}, floor_fraction=0.95)
    assert standing_rank.better(a, b) and standing_rank.better(c, a)
    assert not standing_rank.better(a, a)  # ties keep the earlier one


def test_without_vs_best_the_reference_speedup_decides_as_before():
    old, older = Merit(speedup=8.2), Merit(speedup=8.1)
    assert standing_rank.better(old, older) and not standing_rank.better(older, old)
    assert standing_rank.better(Merit(speedup=1.0), None)
    assert not standing_rank.better(Merit(), None)  # nothing measured: never "better"


def test_gain_beyond_noise_is_on_vs_best():
    ref = Merit(speedup=8.0, vs_best=1.00, shapes={"a": "tie"}, noise=0.02)
    # the reference speedup jumps, vs best does not move beyond the noise: no gain
    assert not standing_rank.is_gain(ref, Merit(speedup=9.0, vs_best=1.015, shapes={"a": "tie"}))
    # the reference speedup drops, vs best rises beyond the noise: a gain
    assert standing_rank.is_gain(ref, Merit(speedup=7.0, vs_best=1.03, shapes={"a": "tie"}))
    # from slower somewhere to slower nowhere is a gain whatever the geomean does
    behind = Merit(speedup=8.0, vs_best=1.10, shapes={"a": "faster", "b": "slower"})
    even = Merit(speedup=8.0, vs_best=1.00, shapes={"a": "tie", "b": "tie"})
    assert standing_rank.is_gain(behind, even) and not standing_rank.is_gain(even, behind)


def test_a_tie_with_the_best_is_inside_the_margin_a_gain_must_clear():
    best = Merit(speedup=8.0, vs_best=1.05, shapes={"a": "tie"}, noise=0.02)
    assert standing_rank.ties(best, Merit(speedup=9.0, vs_best=1.04, shapes={"a": "tie"}))
    assert not standing_rank.ties(best, Merit(speedup=9.0, vs_best=1.00, shapes={"a": "tie"}))
    # the larger noise of the two is the margin
    noisy = Merit(speedup=9.0, vs_best=1.00, shapes={"a": "tie"}, noise=0.06)
    assert standing_rank.ties(best, noisy)
    # slower somewhere against slower nowhere never ties, nor does an attempt without a standing
    assert not standing_rank.ties(best, Merit(speedup=9.0, vs_best=1.049, shapes={"a": "slower"}))
    assert not standing_rank.ties(best, Merit(speedup=8.0))


def test_standing_shapes_of_a_recorded_verdict():
    verdict = Verdict.from_dict(read_attempt_verdict(H200_RUNS / "rmsnorm-search", 5))
    shapes = standing_rank.standing_shapes(verdict.timings)
    big = shapes["32768x8192 bf16"]
    assert big["baseline"] == "torch.compile" and big["standing"] == "slower"
    assert (big["rounds"], big["won"], big["lost"]) == (7, 0, 7)
    assert big["vs_best"] == pytest.approx(0.9813, abs=1e-4)  # the rounds' median ratio
    assert standing_rank.best_baseline_name(shapes) == "torch.compile"
    assert standing_rank.standing_counts(shapes) == "3 faster 1 tie 1 slower"


# --- the committed H200 runs, decided again by the rule ----------------------------------------


def _rerank(run: Path):
    """The recorded run folded as the engine now decides (tests/standing_logs.py)."""
    return fold(reranked_events(run))


def test_rmsnorm_best_by_standing_is_not_the_best_by_reference_speedup():
    run = H200_RUNS / "rmsnorm-search"
    recorded = fold(read_events(run))
    assert recorded.best_attempt == 5  # by the speedup over the reference (8.22x)
    state = _rerank(run)
    best = state.attempts[state.best_attempt]
    five = state.attempts[5]
    assert five.standing_shapes["32768x8192 bf16"]["standing"] == "slower"
    assert "slower" not in {r["standing"] for r in best.standing_shapes.values()}
    assert state.best_attempt == 22  # the highest vs best among those slower nowhere
    assert best.vs_best == pytest.approx(1.0743, abs=1e-4)
    assert best.speedup < five.speedup  # lower over the reference, better where it counts
    summary = summarize(state)
    assert summary["best"]["attempt"] == 22
    assert summary["best"]["versus"] == "torch.compile"
    assert summary["best"]["vs_best"] == pytest.approx(1.0743, abs=1e-4)
    assert summary["best"]["standing_shapes"]["32768x8192 bf16"]["standing"] == "tie"


@pytest.mark.parametrize(("run", "expected"), [("softmax-search", 4), ("attention-search", 1)])
def test_softmax_and_attention_best_by_standing(run, expected):
    state = _rerank(H200_RUNS / run)
    assert state.best_attempt == expected


@pytest.mark.parametrize("run", sorted(p.stem for p in SUMMARIES.glob("*.json")))
def test_old_logs_replay_to_the_summary_they_had(run):
    """The summaries recorded before vs best existed: an older log folds to the same one."""
    expected = json.loads((SUMMARIES / f"{run}.json").read_text())
    if run.startswith("h200-"):
        saved = H200_RUNS / run.removeprefix("h200-")
    else:  # a log kept when examples/ was re-recorded
        saved = ROOT / "tests" / "data" / "old-logs" / run
    now = summarize(fold(read_events(saved)))
    # fields added to the summary since (additive): what the best's kernel and each branch
    # stand on now, as the screen labels them
    for branch in now["branches"]:
        branch.pop("label")
    if now["best"] is not None:
        now["best"].pop("family")
    assert now == expected


# --- stagnation and the target on vs best ----------------------------------------------------


def _verdict_ready(n: int, speedup: float, vs: float, words: dict[str, str], noise=0.02):
    shapes = {
        k: {"baseline": "torch.compile", "vs_best": vs, "standing": w} for k, w in words.items()
    }
    return ev.VerdictReady(
        attempt=n, branch_id="b1", verdict="pass", verdict_kind="pass", gate=None,
        speedup=speedup, floor_fraction=0.9, noise=noise, vs_best=vs, standing_shapes=shapes,
    )  # fmt: skip


def _folded(*verdicts: ev.VerdictReady, settings: dict[str, Any] | None = None):
    state = new_state()
    events: list[ev.Event] = [
        ev.RunStarted(run_id="r", op="rmsnorm", device="cuda", speed_measured=True,
                      settings=dict(settings or {}), target=(settings or {}).get("target")),
        ev.BranchOpened(branch_id="b1", strategy="s"),
    ]  # fmt: skip
    for v in verdicts:
        events.append(
            ev.ProposalReceived(
                branch_id="b1", attempt=v.attempt, parent_attempt=None, source_hash=str(v.attempt),
                strategy="s", move=f"m{v.attempt}", undo_cost="low", undo_reason="", proposer="t",
            )
        )  # fmt: skip
        events.append(v)
    for e in events:
        apply(state, e)
        if isinstance(e, ev.VerdictReady):
            branch, overall = improvement(state, e.attempt)
            if branch:
                apply(state, ev.BestImproved(attempt=e.attempt, branch_id="b1",
                                             speedup=e.speedup, overall=overall))  # fmt: skip
    return state


def test_stagnation_counts_gains_on_vs_best_not_on_the_reference_speedup():
    tie = {"big": "tie", "small": "faster"}
    state = _folded(
        _verdict_ready(1, 8.0, 1.00, tie),
        _verdict_ready(2, 9.5, 1.005, tie),  # +19% over the reference, inside noise vs best
        _verdict_ready(3, 7.0, 1.04, tie),  # lower over the reference, a gain vs best
    )
    b = state.branches["b1"]
    assert b.best_attempt == 3 and state.best_attempt == 3
    assert b.stagnation == 0
    state = _folded(_verdict_ready(1, 8.0, 1.00, tie), _verdict_ready(2, 9.5, 1.005, tie))
    assert state.branches["b1"].stagnation == 1
    assert state.best_attempt == 2  # better (vs best is higher) but not beyond noise


def test_target_is_on_vs_best_and_target_over_reference_keeps_the_old_meaning():
    tie = {"big": "tie"}
    state = _folded(
        _verdict_ready(1, 8.0, 1.03, tie), settings={"target": 2.0, "target_over": "best"}
    )
    assert rules.run_exit(state) is None  # 8x over the reference is not 2x vs best
    assert rules.branch_exit(state, state.branches["b1"]) is None
    state.target = 1.02
    hit = rules.run_exit(state)
    assert hit is not None and hit[0] == ev.RULE_TARGET and "vs best 1.03x" in hit[1]
    state = _folded(
        _verdict_ready(1, 8.0, 1.03, tie), settings={"target": 2.0, "target_over": "reference"}
    )
    hit = rules.run_exit(state)
    assert hit is not None and "speedup over the reference 8x" in hit[1]
    # a log older than vs best meant the reference speedup
    state = _folded(_verdict_ready(1, 8.0, 1.03, tie), settings={"target": 2.0})
    assert rules.target_over(state) == "reference" and rules.run_exit(state) is not None


def test_target_over_is_an_option_and_older_runs_resume_with_the_reference():
    from kernelladder.engine.run.options import RunOptions

    assert RunOptions(op="rmsnorm").target_over == "best"
    assert RunOptions(op="rmsnorm").min_speedup == 0.0
    old = RunOptions.from_dict({"op": "rmsnorm", "target": 2.0, "min_speedup": 1.0})
    assert old.target_over == "reference" and old.min_speedup == 1.0
    assert RunOptions.from_dict({"op": "rmsnorm"}).min_speedup == 1.0  # as it was recorded


# --- engine runs with per-shape timings (runner double) ---------------------------------------


def _timed_verdict(spec: str, request: Any) -> Verdict:
    """A passing verdict over shapes 'ratio:word' against torch.compile (candidate 1 ms)."""
    timings = []
    for i, item in enumerate(spec.split()):
        ratio, word = item.split(":")
        r = float(ratio)
        rounds = request.paired_rounds or 7
        paired = {
            "baseline": "torch.compile", "rounds": rounds, "ratio": r, "verdict": word,
            "won": rounds if word == "faster" else 0, "lost": rounds if word == "slower" else 0,
            "candidate_ms": 1.0, "baseline_ms": r,
        }  # fmt: skip
        timings.append(
            ShapeTiming(
                label=f"shape{i}", reference_ms=8.0, candidate_ms=1.0, noise=0.01, speedup=8.0,
                floor_ms=0.9, floor_fraction=0.9, baselines_ms={"torch.compile": r},
                paired=paired,
            )
        )  # fmt: skip
    gates = {g: GateResult("pass", "ok") for g in GATES}
    return Verdict(
        verdict="pass", kind="pass", gate=None, gates=gates, op="scripted", device="cuda",
        source_hash="", speedup=8.0, floor_fraction=0.9, noise=0.01, timings=tuple(timings),
        feedback=Feedback(expected="ref", saw="ok", fence="the fence"),
    )  # fmt: skip


class StandingRunner(ScriptedRunner):
    """Runner double (no GPU here): a source's `# shapes: 1.05:faster 0.99:tie` line gives
    its verdict's per-shape times against torch.compile; a re-measure (pair_every_shape)
    reads `# again: ...` instead when the source has one."""

    def __init__(self) -> None:
        super().__init__(device="cuda")
        self.requests: list[Any] = []

    async def verify(self, request, on_progress=None, on_slot=None) -> Verdict:
        self.requests.append(request)
        lines = {
            line.split(":", 1)[0].strip("# "): line.split(":", 1)[1].strip()
            for line in request.source.splitlines()
            if line.startswith(("# shapes:", "# again:"))
        }
        if "shapes" not in lines:
            return await super().verify(request, on_progress, on_slot)
        spec = lines.get("again") if request.pair_every_shape else None
        verdict = _timed_verdict(spec or lines["shapes"], request)
        if "# stops early" in request.source and request.early_stop:
            stop = {"attempt": request.early_stop["attempt"], "shape": "shape0",
                    "candidate_ms": 1.0, "best_ms": 0.9, "ratio": 1.11, "band": 0.05}  # fmt: skip
            verdict = replace(verdict, early_stop=stop)
        return verdict


def _standing_move(name: str, shapes: str, again: str = ""):
    body = f"# shapes: {shapes}\n" + (f"# again: {again}\n" if again else "")
    return move("pass 8.0", name, body=body)


async def test_the_best_is_re_measured_at_the_end_and_the_summary_says_confirmed(tmp_path):
    moves = [
        _standing_move("a", "1.02:tie 1.10:faster"),
        _standing_move("b", "1.20:faster 0.95:slower"),  # higher vs best, slower somewhere
        _standing_move("c", "1.01:tie 1.20:faster"),
    ]
    runner = StandingRunner()
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=3)
    state = await run.run()
    assert state.best_attempt == 3  # slower nowhere, then vs best
    confirms = [r for r in runner.requests if r.pair_every_shape]
    assert confirms and all(r.paired_rounds == 15 for r in confirms)
    assert all(r.paired_min_rounds == 5 for r in confirms)
    # the search's own rounds stop once a tie is settled, after at least 3 (the word all
    # 7 would give: tests/verifier/test_sequential_rounds.py)
    searched = [r for r in runner.requests if not r.pair_every_shape]
    assert searched and all(r.paired_min_rounds == 3 and r.paired_rounds is None for r in searched)
    assert confirms[0].fresh_worker and not any(r.fresh_worker for r in confirms[1:])
    events = read_events(run.run_dir)
    confirmed = [e for e in events if isinstance(e, ev.BestConfirmed)]
    assert confirmed[0].attempt == 3 and confirmed[0].held and confirmed[0].rounds == 15
    assert confirmed[0].shapes["shape0"]["rounds"] == 15
    assert events[-1].kind == "run_finished" and events[-1].best_vs_best == pytest.approx(
        (1.01 * 1.2) ** 0.5, abs=1e-6
    )
    summary = summarize(state)
    assert summary["best"]["confirmed"] == "confirmed" and summary["confirmed_best"] == 3
    assert summary["best"]["vs_best"] == pytest.approx((1.01 * 1.2) ** 0.5, abs=1e-4)
    assert summary["best"]["speedup_over"] == "reference"
    assert summarize(fold(read_events(run.run_dir))) == summary  # replay equals live


async def test_a_best_that_does_not_hold_gives_way_to_the_re_measured_runner_up_that_held(
    tmp_path,
):
    moves = [
        _standing_move("a", "1.02:tie 1.04:faster"),
        _standing_move("b", "1.01:tie 1.50:faster", again="0.97:slower 1.40:faster"),
    ]
    runner = StandingRunner()
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=2)
    state = await run.run()
    events = read_events(run.run_dir)
    confirmed = [e for e in events if isinstance(e, ev.BestConfirmed)]
    assert [(c.attempt, c.held) for c in confirmed] == [(2, False), (1, True)]
    assert "slower than the fastest baseline at shape0" in confirmed[0].detail
    # the run's best is the one that held; the first keeps its "did not hold" mark
    assert (state.best_attempt, state.ranked_best) == (1, 2)
    assert state.confirmations[2]["held"] is False
    finished = [e for e in events if isinstance(e, ev.RunFinished)][-1]
    assert finished.best_attempt == 1
    from kernelladder.app.headless import event_line

    line = event_line(finished, state)
    assert "; best #1 " in line and " · confirmed (#2 did not hold) (" in line, line
    assert line.endswith("x over reference)")
    summary = summarize(state)
    assert summary["best"]["attempt"] == 1 and summary["best"]["confirmed"] == "confirmed"
    assert summary["best"]["instead_of"] == {"attempt": 2, "confirmed": "did not hold"}
    assert summary["confirmed_best"] == 1 and "none_held" not in summary
    assert summarize(fold(events)) == summary  # replay --json equals live
    assert (run.run_dir / "attempts" / "2.confirm.json").exists()


def _as_written(*script):
    """The moves handed out as written, one per proposal (the scripted proposer's list
    form makes each source unique; these tests need a source handed in twice)."""
    queue = list(script)

    def moves(ctx):
        if not queue:
            raise ProposerExhausted("script finished")
        return queue.pop(0)

    return moves


async def test_a_kernel_verified_twice_is_not_its_own_runner_up_at_the_end(tmp_path):
    moves = _as_written(
        _standing_move("a", "1.02:tie 1.10:faster"),
        _standing_move("b", "1.00:tie 1.01:tie"),
        _standing_move("a", "1.02:tie 1.10:faster"),  # the same source again: a tie with #1
    )
    runner = StandingRunner()
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=3)
    state = await run.run()
    assert state.attempts[1].source_hash == state.attempts[3].source_hash
    confirmed = [e.attempt for e in read_events(run.run_dir) if isinstance(e, ev.BestConfirmed)]
    assert confirmed == [1]  # #3 is #1 again: not re-measured as its runner-up
    assert state.best_attempt == 1


async def test_a_kernel_measured_again_and_luckier_is_not_a_new_best(tmp_path):
    """A proposer may hand in a kernel it wrote before. Its second measurement came out
    a little better (luck): the run's best stays the first, which it is, and the branch
    counts no gain."""

    class Luckier(StandingRunner):
        def __init__(self) -> None:
            super().__init__()
            self.seen: set[str] = set()

        async def verify(self, request, on_progress=None, on_slot=None):
            again = request.source in self.seen and not request.pair_every_shape
            self.seen.add(request.source)
            if again:  # the same source, measured 4 % faster on every shape
                return _timed_verdict("1.06:faster 1.14:faster", request)
            return await super().verify(request, on_progress, on_slot)

    moves = _as_written(
        _standing_move("a", "1.02:tie 1.10:faster"),
        _standing_move("b", "1.00:tie 1.01:tie"),
        _standing_move("a", "1.02:tie 1.10:faster"),
    )
    run, _, _ = make_run(tmp_path, moves, runner=Luckier(), max_attempts=3, confirm=False)
    state = await run.run()
    assert state.attempts[3].vs_best > state.attempts[1].vs_best  # measured better ...
    assert state.best_attempt == 1  # ... yet the same kernel: #1 stays the best
    events = read_events(run.run_dir)
    assert [e.attempt for e in events if isinstance(e, ev.BestImproved)] == [1]
    assert state.branches["b1"].stagnation == 2  # #2 and #3: no gain
    assert summarize(fold(events)) == summarize(state)  # replay equals live


async def test_no_confirm_skips_the_re_measure(tmp_path):
    runner = StandingRunner()
    run, _, _ = make_run(
        tmp_path, [_standing_move("a", "1.02:tie")], runner=runner, max_attempts=1, confirm=False
    )
    await run.run()
    assert not any(r.pair_every_shape for r in runner.requests)
    kinds = [e.kind for e in read_events(run.run_dir)]
    assert "best_confirmed" not in kinds


async def test_without_a_gpu_the_re_measure_is_skipped_and_said(tmp_path):
    run, runner, _ = make_run(tmp_path, [move("pass 1.2", "a")], max_attempts=1, device="cpu")
    state = await run.run()
    assert state.best_attempt == 1
    events = read_events(run.run_dir)
    assert not any(isinstance(e, ev.BestConfirmed) for e in events)
    notes = [e.message for e in events if isinstance(e, ev.Notice)]
    assert "best #1 not re-measured: speed is not measured without a GPU" in notes
    summary = summarize(state)
    assert "confirmed" not in summary and "vs_best" not in summary["best"]
    assert len(runner.calls) == 1


# --- a correct kernel slower than the reference is a step ------------------------------------


async def test_optimize_passes_min_speedup_zero_and_a_slow_correct_kernel_passes(tmp_path):
    run, runner, _ = make_run(
        tmp_path,
        [move("pass 0.9", "slow"), move("pass 0.9", "slow"), move("pass 0.9", "slow")],
        max_attempts=3,
        confirm=False,
    )
    state = await run.run()
    assert state.passed == 3 and state.best_attempt == 1
    assert all(b.rule != ev.RULE_REPEATED_FAILURE for b in state.branches.values())
    assert run.options.min_speedup == 0.0


def test_optimize_accepts_min_speedup_zero_and_defaults_to_it():
    from kernelladder.cli import build_parser
    from kernelladder.cli.optimize import options_from_args

    parser = build_parser()
    args = parser.parse_args(["optimize", "rmsnorm", "--min-speedup", "0"])
    assert options_from_args(args).min_speedup == 0.0
    args = parser.parse_args(["optimize", "rmsnorm"])
    assert options_from_args(args).min_speedup == 0.0
    args = parser.parse_args(["optimize", "rmsnorm", "--target-over", "reference", "--no-confirm"])
    options = options_from_args(args)
    assert options.target_over == "reference" and options.confirm is False


def test_the_search_proposer_ranks_its_trials_by_the_same_rule():
    from kernelladder.engine.proposers.search_judging import best_trial as _best
    from kernelladder.engine.proposers.search_memory import PASS, Trial

    run = H200_RUNS / "rmsnorm-search"

    def trial(n: int, order: int) -> Trial:
        v = read_attempt_verdict(run, n)
        return Trial(
            key=str(n), family="f", params={}, order=order, status=PASS, attempt=n,
            speedup=v["speedup"], floor_fraction=v["floor_fraction"], timings=v["timings"],
        )  # fmt: skip

    # #5 is the higher over the reference and slower at 32768x8192; #22 is slower nowhere
    assert _best([trial(5, 0), trial(22, 1)]).attempt == 22
    assert _best([trial(22, 0), trial(5, 1)]).attempt == 22


async def test_a_person_s_stop_still_re_measures_the_best(tmp_path):

    runner = StandingRunner()
    moves = [_standing_move("a", "1.02:tie 1.10:faster"), move("hold", "waits")]
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=5)
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.state.best_attempt == 1 and len(runner.requests) >= 1, what="a best")
    await until(lambda: 2 in run.state.attempts, what="the second attempt")
    await run.stop("user")
    runner.release.set()
    state = await task
    assert state.finish_reason == ev.RULE_USER_STOP
    confirmed = [e for e in read_events(run.run_dir) if isinstance(e, ev.BestConfirmed)]
    assert [c.attempt for c in confirmed][:1] == [state.best_attempt]


async def test_the_target_stops_the_run_on_vs_best_not_on_the_reference_speedup(tmp_path):
    runner = StandingRunner()
    moves = [
        _standing_move("a", "1.01:tie 1.02:tie"),  # 8x over the reference, 1.015x vs best
        _standing_move("b", "1.10:faster 1.12:faster"),
        _standing_move("c", "1.20:faster 1.20:faster"),
    ]
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=3, target=1.05, confirm=False)
    state = await run.run()
    assert state.finish_reason == ev.RULE_TARGET and state.best_attempt == 2
    assert "vs best" in state.finish_detail and state.attempts_used == 2


# --- time where it decides something: the early stop ------------------------------------


async def test_a_branch_sends_its_best_for_the_early_stop_and_that_attempt_is_never_a_best(
    tmp_path,
):
    moves = [
        _standing_move("a", "1.02:tie 1.10:faster"),
        # better figures on paper, but its timing stopped early: coarse, never a best
        move("pass 8.0", "b", body="# shapes: 1.30:faster 1.30:faster\n# stops early\n"),
        _standing_move("c", "1.01:tie 1.05:faster"),
    ]
    runner = StandingRunner()
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=3, confirm=False)
    state = await run.run()
    first, second, _third = runner.requests
    assert first.early_stop is None and first.pipeline  # nothing timed yet
    assert second.early_stop == {
        "attempt": 1,
        "timings": {"shape0": 1.0, "shape1": 1.0},
        "noise": {"shape0": 0.01, "shape1": 0.01},
    }
    events = read_events(run.run_dir)
    ready = {e.attempt: e for e in events if isinstance(e, ev.VerdictReady)}
    assert ready[2].early_stop == 1 and ready[1].early_stop is None
    assert ready[2].summary.startswith("not faster than #1 (stopped early; coarse times): ")
    assert not any(isinstance(e, ev.BestImproved) and e.attempt == 2 for e in events)
    assert state.best_attempt == 1 and state.attempts[2].early_stop == 1
    assert state.branches["b1"].stagnation >= 1  # not a gain
    assert fold(events).best_attempt == 1  # a replay says the same


async def test_no_early_stop_and_the_serial_path_are_asked_as_the_person_said(tmp_path):
    moves = [_standing_move("a", "1.02:tie 1.10:faster"), _standing_move("b", "1.0:tie 1.0:tie")]
    runner = StandingRunner()
    run, _, _ = make_run(
        tmp_path, moves, runner=runner, max_attempts=2, confirm=False, early_stop=False,
        verify="serial",
    )  # fmt: skip
    await run.run()
    assert [r.early_stop for r in runner.requests] == [None, None]
    assert not any(r.pipeline for r in runner.requests)


async def test_the_end_s_fresh_worker_is_asked_for_after_the_first_verdict(tmp_path):
    class Counting(StandingRunner):
        def __init__(self) -> None:
            super().__init__()
            self.prepared_at: list[int] = []  # verdicts recorded when it was asked for

        def prepare_fresh_worker(self, op=None) -> None:
            assert op == "scripted"  # the op's wire form: its baselines are compiled there
            self.prepared_at.append(sum(1 for a in run.state.attempts.values() if a.verdict))

    moves = [_standing_move(x, "1.02:tie 1.10:faster") for x in "abcd"]
    runner = Counting()
    run, _, _ = make_run(tmp_path, moves, runner=runner, max_attempts=4)
    await run.run()
    # asked for once, as the first verdict came (not when the end was near): a run that
    # ends by its branches' end would otherwise wait for a worker's start at its end
    assert runner.prepared_at == [1]
    assert any(r.fresh_worker for r in runner.requests)


async def test_the_re_measure_runs_beside_a_profile_still_in_flight(tmp_path, monkeypatch):
    """Doubles: profile_candidate_async and availability (no GPU or ncu here), held until
    the test lets the profile finish (ncu takes 8-18 s on the H200)."""
    from kernelladder.verifier.host import profile as profile_mod

    release = asyncio.Event()

    async def held(op_wire, source, out_dir, name, timeout_s=300.0, **holds):
        await release.wait()
        return profile_mod.ProfileOutcome("failed", "held by the test, then let go")

    monkeypatch.setattr(profile_mod, "availability", lambda *a, **k: (True, "ncu (double)"))
    monkeypatch.setattr(profile_mod, "profile_candidate_async", held)
    moves = [_standing_move("a", "1.02:tie 1.10:faster")]
    run, _, _ = make_run(tmp_path, moves, runner=StandingRunner(), max_attempts=1)
    task = asyncio.ensure_future(run.run())
    await until(lambda: run.state.attempts.get(1) and run.state.attempts[1].verdict, "#1 judged")
    await until(
        lambda: any(isinstance(e, ev.BestConfirmed) for e in read_events(run.run_dir)),
        what="the re-measure, while #1's profile is held",
    )
    assert not task.done()  # the run's end waits for the profile
    release.set()
    await asyncio.wait_for(task, 10)
    kinds = [type(e).__name__ for e in read_events(run.run_dir)]
    assert kinds.index("BestConfirmed") < kinds.index("ProfileReady") < kinds.index("RunFinished")
