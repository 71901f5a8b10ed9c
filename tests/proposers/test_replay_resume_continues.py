"""A resumed `replay` run continues where it stopped: the saved sources its log already
holds a ProposalReceived for (matched by source hash, per branch label) are not proposed
again, the rest follow in the saved order, and the branches then end as a finished
replay ends. Through the real engine and the real ReplayProposer; the runner is the
scripted double of helpers.py (no GPU here: its verdicts are scripted)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

from helpers import ScriptedRunner, make_run, move, until

from kernelladder.engine import resume_run
from kernelladder.engine.proposers.replay import ReplayProposer
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events


def _proposals(events: list[ev.Event]) -> list[ev.ProposalReceived]:
    return [e for e in events if isinstance(e, ev.ProposalReceived)]


def _sessions(events: list[ev.Event]) -> list[list[ev.Event]]:
    """The events of each session: the first, then one list per resume."""
    starts = [i for i, e in enumerate(events) if isinstance(e, ev.RunStarted | ev.RunReopened)]
    return [events[a:b] for a, b in zip(starts, [*starts[1:], len(events)], strict=True)]


def _labels(events: list[ev.Event]) -> dict[str, str]:
    return {e.branch_id: e.strategy for e in events if isinstance(e, ev.BranchOpened)}


async def _saved_run(tmp_path: Path) -> tuple[Path, list[ev.ProposalReceived]]:
    """A finished scripted run of three labels to replay; one source holds its verifier
    until released, so a replay of it can be caught mid-run."""
    plan = {
        ("b1", "alpha"): [
            move("pass 1.1"),
            move("pass 1.2"),
            move("hold", "held"),
            move("pass 1.4"),
        ],
        ("b2", "beta"): [move("pass 1.3"), move("fail correctness off by one"), move("pass 1.5")],
        ("b3", "gamma"): [move("pass 1.6"), move("pass 1.7")],
    }
    moves = {bid: [replace(m, strategy=label) for m in ms] for (bid, label), ms in plan.items()}
    run, runner, _ = make_run(
        tmp_path / "saved", moves, strategies=["alpha", "beta", "gamma"], branches=3,
        stagnation=100,
    )  # fmt: skip
    runner.release.set()
    state = await asyncio.wait_for(run.run(), 10)
    assert state.finish_reason == ev.RULE_ALL_BRANCHES_DONE and len(state.attempts) == 9
    return run.run_dir, _proposals(read_events(run.run_dir))


def _queues(saved: list[ev.ProposalReceived], opened: list[str]) -> dict[str, list[str]]:
    """What a replay on `opened` labels proposes per label: the saved hashes in attempt
    order, label i of the saved run folded into opened label i mod len(opened)."""
    order = list(dict.fromkeys(p.strategy for p in saved))
    into = {label: opened[i % len(opened)] for i, label in enumerate(order)}
    out: dict[str, list[str]] = {label: [] for label in opened}
    for p in sorted(saved, key=lambda p: p.attempt):
        out[into[p.strategy]].append(p.source_hash)
    return out


def _minus(queue: list[str], done: list[str]) -> list[str]:
    left = list(queue)
    for digest in done:
        left.remove(digest)
    return left


def _check_continued(run_dir: Path, saved_queues: dict[str, list[str]]) -> None:
    events = read_events(run_dir)
    first, *resumed = _sessions(events)
    assert resumed, "the run was not resumed"
    labels = _labels(events)
    numbers = [p.attempt for p in _proposals(events)]
    assert numbers == list(range(1, len(numbers) + 1))  # never numbered twice, no gap
    for label, queue in saved_queues.items():
        done = [p.source_hash for p in _proposals(first) if labels[p.branch_id] == label]
        again = [
            p.source_hash for s in resumed for p in _proposals(s) if labels[p.branch_id] == label
        ]
        assert done == queue[: len(done)]  # the first session: a prefix, in order
        # the resumed sessions: only the sources not proposed yet, in the saved order
        assert again == _minus(queue, done), label
    # every saved source proposed exactly as often as it was saved
    all_saved = Counter(h for q in saved_queues.values() for h in q)
    assert Counter(p.source_hash for p in _proposals(events)) == all_saved
    last = resumed[-1]
    exhausted = [e for e in last if isinstance(e, ev.BranchExhausted)]
    assert {e.rule for e in exhausted} == {ev.RULE_PROPOSER_EXHAUSTED}
    finished = [e for e in last if isinstance(e, ev.RunFinished)]
    assert [f.reason for f in finished] == [ev.RULE_ALL_BRANCHES_DONE]
    left = [e for e in last if isinstance(e, ev.Notice) and "not re-verified" in e.message]
    assert left == []
    judged = {e.attempt for e in events if isinstance(e, ev.VerdictReady)}
    assert judged == set(numbers)  # each attempt verified (a cut-off one on resume)


async def test_a_replay_stopped_by_its_budget_resumes_with_the_sources_left(tmp_path):
    saved_dir, saved = await _saved_run(tmp_path)
    runner = ScriptedRunner()
    runner.release.set()
    # two branches for three saved labels: gamma's sources are folded into alpha's
    run, _, _ = make_run(
        tmp_path / "replay", None, runner=runner, proposer=ReplayProposer(run_dir=str(saved_dir)),
        branches=2, max_attempts=4, stagnation=100,
    )  # fmt: skip
    state = await asyncio.wait_for(run.run(), 10)
    assert state.finish_reason == ev.RULE_MAX_ATTEMPTS and len(state.attempts) == 4
    assert sorted(_labels(read_events(run.run_dir)).values()) == ["alpha", "beta"]

    runner2 = ScriptedRunner()
    runner2.release.set()
    resumed = resume_run(
        run.run_dir, runner=runner2, proposer=ReplayProposer(run_dir=str(saved_dir)),
        overrides={"max_attempts": 40},
    )  # fmt: skip
    await asyncio.wait_for(resumed.run(), 10)
    _check_continued(run.run_dir, _queues(saved, ["alpha", "beta"]))


async def test_a_killed_replay_resumes_without_proposing_a_source_twice(tmp_path):
    saved_dir, saved = await _saved_run(tmp_path)
    runner = ScriptedRunner()  # holds the replayed "held" source until released
    run, _, _ = make_run(
        tmp_path / "replay", None, runner=runner, proposer=ReplayProposer(run_dir=str(saved_dir)),
        branches=3, stagnation=100,
    )  # fmt: skip
    task = asyncio.ensure_future(run.run())
    await until(lambda: any("# held" in c for c in runner.calls), what="the held source runs")
    killed = tmp_path / "killed"  # what a kill -9 leaves: every published event on disk
    shutil.copytree(run.run_dir, killed)
    runner.release.set()
    await asyncio.wait_for(task, 10)
    before = read_events(killed)
    assert not any(isinstance(e, ev.RunFinished) for e in before)

    runner2 = ScriptedRunner()
    runner2.release.set()
    resumed = resume_run(killed, runner=runner2, proposer=ReplayProposer(run_dir=str(saved_dir)))
    await asyncio.wait_for(resumed.run(), 10)
    reopened = next(e for e in read_events(killed) if isinstance(e, ev.RunReopened))
    held = next(p.attempt for p in _proposals(before) if "held" in p.move)
    assert held in reopened.requeued_attempts  # re-verified under its own number
    _check_continued(killed, _queues(saved, ["alpha", "beta", "gamma"]))


async def test_a_source_saved_twice_is_proposed_again_once_per_copy_left(tmp_path):
    """The saved run proposed the same source three times: a resume after the first is
    done proposes it twice more, not three times and not never."""
    saved_dir = tmp_path / "saved"
    (saved_dir / "attempts").mkdir(parents=True)
    source = move("pass 1.2", "same").source
    lines = [{"kind": "branch_opened", "branch_id": "b1", "strategy": "same"}]
    for n in (1, 2, 3):
        (saved_dir / "attempts" / f"{n}.py").write_text(source)
        lines.append(
            {"kind": "proposal_received", "attempt": n, "branch_id": "b1", "strategy": "same",
             "move": f"same move {n}"}
        )  # fmt: skip
    (saved_dir / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    run, _, _ = make_run(
        tmp_path / "replay", None, proposer=ReplayProposer(run_dir=str(saved_dir)),
        max_attempts=1, stagnation=100,
    )  # fmt: skip
    await asyncio.wait_for(run.run(), 10)
    resumed = resume_run(
        run.run_dir, runner=ScriptedRunner(), proposer=ReplayProposer(run_dir=str(saved_dir)),
        overrides={"max_attempts": 40},
    )  # fmt: skip
    await asyncio.wait_for(resumed.run(), 10)
    first, second = _sessions(read_events(run.run_dir))
    assert [p.move for p in _proposals(first)] == ["replay of #1: same move 1"]
    assert [(p.attempt, p.move) for p in _proposals(second)] == [
        (2, "replay of #2: same move 2"),
        (3, "replay of #3: same move 3"),
    ]
    digest = _proposals(first)[0].source_hash
    _check_continued(run.run_dir, {"same": [digest] * 3})
