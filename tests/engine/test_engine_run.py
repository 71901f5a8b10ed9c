"""The engine's main loop on scripted doubles (see helpers.py for why):
numbering, files, exit rules, retries, proposer failures, concurrency."""

from __future__ import annotations

import json

from helpers import ScriptedProposer, ScriptedRunner, kinds, make_run, move, verdict_for

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events, sha256_text
from kernelladder.engine.record.state import fold
from kernelladder.engine.record.summary import summarize


async def test_basic_run_numbers_attempts_and_writes_files(tmp_path):
    run, runner, _ = make_run(
        tmp_path,
        [move("pass 1.2"), move("fail correctness err 3 at 7"), move("pass 1.5")],
        max_attempts=10,
    )
    state = await run.run()
    events = read_events(run.run_dir)
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
    assert state.finish_reason == ev.RULE_ALL_BRANCHES_DONE
    assert state.branches["b1"].rule == ev.RULE_PROPOSER_EXHAUSTED
    assert sorted(state.attempts) == [1, 2, 3]
    for e in events:
        if isinstance(e, ev.ProposalReceived):
            src = (run.run_dir / "attempts" / f"{e.attempt}.py").read_text()
            assert sha256_text(src) == e.source_hash
        if isinstance(e, ev.VerdictReady):
            text = (run.run_dir / "attempts" / f"{e.attempt}.json").read_text()
            assert sha256_text(text) == e.verdict_hash
    assert state.best_attempt == 3 and state.best_speedup == 1.5
    # the third proposal started from the best so far (attempt 1), not the failure
    assert state.attempts[3].parent == 1
    # dead ends: the failure reached the verdict file of the next attempt
    v3 = json.loads((run.run_dir / "attempts" / "3.json").read_text())
    assert any("correctness" in d for d in v3["feedback"]["dead_ends"])
    assert summarize(state) == summarize(fold(events))
    assert runner.closed


async def test_max_attempts_across_branches(tmp_path):
    run, runner, _ = make_run(
        tmp_path, lambda ctx: move("pass 1.0"), branches=3, max_attempts=5, stagnation=100
    )
    runner._slots = 2
    state = await run.run()
    assert state.finish_reason == ev.RULE_MAX_ATTEMPTS
    assert state.attempts_used == 5 and sorted(state.attempts) == [1, 2, 3, 4, 5]
    assert all(a.verdict == "pass" for a in state.attempts.values())
    assert runner.max_concurrent <= 2
    assert {b.status for b in state.branches.values()} == {"stopped"}


async def test_stagnation_counts_gains_beyond_noise(tmp_path):
    # 1.0 -> 1.005 (inside 1% noise: not a gain) -> 1.3 (gain, with noise 0.1)
    moves = [move("pass 1.0"), move("pass 1.005"), move("pass 1.3 noise 0.1")]
    moves += [move("pass 1.4 noise 0.1"), move("pass 1.3"), move("pass 1.0")]
    run, _, _ = make_run(tmp_path, moves, stagnation=3)
    state = await run.run()
    b = state.branches["b1"]
    # 1.4 is not beyond 1.3 * (1 + 0.1): three attempts without a gain after 1.3
    assert (b.rule, b.stagnation) == (ev.RULE_STAGNATION, 3)
    assert b.best_speedup == 1.4  # still the fastest (best != gain)
    assert len(b.attempts) == 6


async def test_stagnation_on_cpu_counts_attempts_after_the_lines_first_pass(tmp_path):
    # no speed: no kernel is judged better, so only the line's first pass is a gain
    moves = [move("pass"), move("fail correctness a"), move("pass")]
    moves += [move("fail load b"), move("fail fence c"), move("fail speed d")]
    run, _, _ = make_run(tmp_path, moves, stagnation=3, device="cpu")
    state = await run.run()
    assert not state.speed_measured
    assert state.best_attempt == 1 and state.best_speedup is None
    b = state.branches["b1"]
    assert b.rule == ev.RULE_STAGNATION and len(b.attempts) == 4
    assert b.detail.startswith("3 attempts after its line's first passing kernel")


async def test_target_reached_stops_the_run(tmp_path):
    run, _, _ = make_run(
        tmp_path, [move("pass 1.2"), move("pass 2.5"), move("pass 3.0")], target=2.0
    )
    state = await run.run()
    assert state.finish_reason == ev.RULE_TARGET
    assert state.branches["b1"].rule == ev.RULE_TARGET
    assert len(state.attempts) == 2


async def test_repeated_failure_signature_ignores_numbers_and_paths(tmp_path):
    moves = [
        move("fail correctness max error 3.5 at index 17 in /tmp/a/x.py"),
        move("fail correctness max error 0.25 at index 4 in /tmp/b/y.py"),
        move("fail correctness max error 1e-3 at index 99 in /home/z.py"),
        move("pass 2.0"),
    ]
    run, _, _ = make_run(tmp_path, moves)
    state = await run.run()
    b = state.branches["b1"]
    assert b.rule == ev.RULE_REPEATED_FAILURE and len(b.attempts) == 3


async def test_budget_usd(tmp_path):
    def priced(ctx):
        p = move("pass 1.1")
        return type(p)(**{**p.__dict__, "cost_usd": 0.4, "tokens_in": 100, "tokens_out": 10})

    run, _, _ = make_run(tmp_path, priced, budget_usd=1.0, stagnation=100)
    state = await run.run()
    assert state.finish_reason == ev.RULE_BUDGET_USD
    assert state.attempts_used == 3 and abs(state.cost_usd - 1.2) < 1e-9
    assert summarize(state)["cost"]["tokens_in"] == 300


async def test_time_budget(tmp_path):
    run, runner, _ = make_run(
        tmp_path, lambda ctx: move("pass 1.0"), time_limit_s=0.3, stagnation=10_000,
        max_attempts=10_000,
    )  # fmt: skip
    runner.delay = 0.02
    state = await run.run()
    assert state.finish_reason == ev.RULE_BUDGET_TIME
    assert 0.3 <= state.elapsed_s < 5


async def test_runner_lost_retries_then_gives_up(tmp_path):
    run, runner, _ = make_run(tmp_path, [move("lost 1 then pass 1.3"), move("lost 9 then pass")])
    run.retry_backoff_s = 0.01
    state = await run.run()
    events = read_events(run.run_dir)
    retried = [e for e in events if isinstance(e, ev.AttemptRetried)]
    assert [e.attempt for e in retried] == [1, 2, 2]
    assert state.attempts[1].verdict == "pass" and state.attempts[1].retries == 1
    starts = [(e.attempt, e.retry) for e in events if isinstance(e, ev.AttemptStarted)]
    assert starts == [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert state.finish_reason == ev.RULE_ERROR and "runner lost" in state.finish_detail
    assert state.attempts[2].verdict is None  # a resume re-runs it


async def test_proposer_failures(tmp_path):
    from kernelladder.engine.protocols import ProposerError

    moves = [ProposerError("bad reply"), move("pass 1.1")] + [ProposerError("x")] * 3
    run, _, _ = make_run(tmp_path, moves)
    state = await run.run()
    evs = read_events(run.run_dir)
    assert kinds(evs).count("proposal_failed") == 4
    assert state.branches["b1"].rule == ev.RULE_REPEATED_FAILURE
    assert any(isinstance(e, ev.Notice) and "bad reply" in e.message for e in evs)

    run, _, _ = make_run(tmp_path / "fatal", [ProposerError("no API key", fatal=True)])
    state = await run.run()
    assert state.finish_reason == ev.RULE_ERROR and "no API key" in state.finish_detail


async def test_progress_is_coalesced(tmp_path):
    run, _, _ = make_run(tmp_path, [move("pass 1.1")])
    await run.run()
    progress = [e for e in read_events(run.run_dir) if isinstance(e, ev.AttemptProgress)]
    # the runner reports 10 lines per gate; only the first of each gate within 0.5 s land
    assert 2 <= len(progress) <= 8
    assert {p.gate for p in progress} == {"load", "correctness"}


async def test_branches_run_concurrently_within_slots(tmp_path):
    runner = ScriptedRunner(slots=2, delay=0.05)
    proposer = ScriptedProposer(lambda ctx: move("pass 1.0"))
    run, _, _ = make_run(
        tmp_path, None, runner=runner, proposer=proposer, branches=3, max_attempts=9,
        stagnation=100,
    )  # fmt: skip
    state = await run.run()
    assert runner.max_concurrent == 2
    assert sorted(len(b.attempts) for b in state.branches.values())[0] >= 1
    assert state.attempts_used == 9


async def test_history_carries_meta_and_sources_to_the_proposer(tmp_path):
    meta = {"family": "one-pass", "params": {"BLOCK": 128}}
    run, _, proposer = make_run(tmp_path, [move("pass 1.2", meta=meta), move("pass 1.3")])
    state = await run.run()
    entry = proposer.contexts[1].history[0]
    assert entry["meta"] == meta and entry["attempt"] == 1 and entry["verdict"] == "pass"
    assert entry["source"] == (run.run_dir / "attempts" / "1.py").read_text()
    assert state.attempts[1].family == "one-pass"
    assert proposer.contexts[1].parent_source == entry["source"]
    assert proposer.contexts[1].parent_verdict["verdict"] == "pass"


def test_scripted_runner_reads_outcomes():
    v = verdict_for("# outcome: fail correctness max error 3.5 at index 17", "cuda")
    assert (v.verdict, v.gate, v.gates["correctness"].detail) == (
        "fail", "correctness", "max error 3.5 at index 17",
    )  # fmt: skip
    assert verdict_for("# outcome: pass 1.4", "cuda").speedup == 1.4
    assert verdict_for("# outcome: pass 1.4", "cpu").speedup is None
