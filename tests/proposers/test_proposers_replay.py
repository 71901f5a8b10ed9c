"""The `replay` proposer re-proposes a saved run's sources, per branch, in attempt order;
with fewer branches than the saved run, every source is still re-proposed."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys

import pytest

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.replay import ReplayProposer, read_events
from kernelladder.engine.protocols import ProposalContext, ProposerError, ProposerExhausted


def _source(n: int) -> str:
    return f"import triton\n\n\ndef kernel(x):\n    return {n}\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def run_dir(tmp_path):
    """A saved run: two branches, attempts interleaved, and a torn last line."""
    (tmp_path / "attempts").mkdir()
    events = [
        {"kind": "run_started", "seq": 0, "run_id": "r1", "op": "softmax"},
        {"kind": "branch_opened", "seq": 1, "branch_id": "b1", "strategy": "one-pass"},
        {"kind": "branch_opened", "seq": 2, "branch_id": "b2", "strategy": "online"},
    ]
    plan = [
        (1, "b1", "one-pass", "low"),
        (2, "b2", "online", "medium"),
        (3, "b1", "one-pass", "high"),
        (4, "b1", "one-pass", "low"),
    ]
    for n, bid, label, cost in plan:
        src = _source(n)
        (tmp_path / "attempts" / f"{n}.py").write_text(src)
        events.append(
            {
                "kind": "proposal_received",
                "seq": len(events),
                "branch_id": bid,
                "attempt": n,
                "parent_attempt": None,
                "source_hash": _sha(src),
                "strategy": label,
                "move": f"move {n}",
                "undo_cost": cost,
                "undo_reason": f"reason {n}",
                "proposer": "search",
                "model": None,
            }
        )
    lines = [json.dumps(e) for e in events]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + '\n{"kind": "proposal_rec')
    return tmp_path


def ctx(strategy: str) -> ProposalContext:
    return ProposalContext(
        op={"name": "softmax"},
        branch_id="b9",
        strategy=strategy,
        parent_attempt=None,
        parent_source="",
        parent_verdict=None,
        feedback={},
        dead_ends=(),
        hints="",
    )


def test_replays_each_branch_in_attempt_order_then_is_exhausted(run_dir):
    replay = get_proposer("replay", replay_from=str(run_dir))
    assert replay.strategies({"name": "softmax"}, 3) == ["one-pass", "online"]
    got = [asyncio.run(replay.propose(ctx("one-pass"))) for _ in range(3)]
    assert [p.source for p in got] == [_source(1), _source(3), _source(4)]
    assert [p.undo_cost for p in got] == ["low", "high", "low"]
    assert got[0].move == "replay of #1: move 1" and got[0].meta["replayed_attempt"] == 1
    with pytest.raises(ProposerExhausted):
        asyncio.run(replay.propose(ctx("one-pass")))
    assert asyncio.run(replay.propose(ctx("online"))).source == _source(2)
    assert replay.remaining() == 0


def test_fewer_branches_fold_the_extra_labels_in_attempt_order(run_dir):
    replay = ReplayProposer(run_dir=str(run_dir))
    replay.strategies({"name": "softmax"}, 1)  # prepare, then start: asked twice
    assert replay.strategies({"name": "softmax"}, 1) == ["one-pass"]
    assert (
        replay.left_over()
        == f"replay: 4 saved source(s) of {run_dir} were not re-verified (#1, #2, #3, #4)"
    )
    got = [asyncio.run(replay.propose(ctx("one-pass"))) for _ in range(4)]
    assert [p.meta["replayed_attempt"] for p in got] == [1, 2, 3, 4]
    assert got[1].move == "replay of #2 (online): move 2" and got[1].strategy == "one-pass"
    assert got[1].meta["replayed_branch"] == "b2"
    assert replay.remaining() == 0 and replay.left_over() is None
    with pytest.raises(ProposerExhausted):
        asyncio.run(replay.propose(ctx("one-pass")))


def test_a_source_that_changed_since_the_run_is_refused(run_dir):
    (run_dir / "attempts" / "2.py").write_text("tampered\n")
    replay = ReplayProposer(run_dir=str(run_dir))
    with pytest.raises(ProposerError, match="does not match the hash"):
        asyncio.run(replay.propose(ctx("online")))


def test_a_missing_run_is_bad_usage(tmp_path):
    with pytest.raises(ValueError, match="no saved run"):
        ReplayProposer(run_dir=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="needs the saved run"):
        ReplayProposer()


def _optimize(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", "optimize", "rmsnorm", "--device", "cpu", *args],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _log(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_three_branch_run_replayed_on_one_branch_reverifies_every_source(tmp_path):
    saved_dir, again_dir, short_dir = tmp_path / "saved", tmp_path / "again", tmp_path / "short"
    out = _optimize("--branches", "3", "--max-attempts", "4", "--run-dir", str(saved_dir))
    assert out.returncode == 0, out.stderr[-2000:]
    saved = [e for e in _log(saved_dir) if e["kind"] == "proposal_received"]
    assert len({e["branch_id"] for e in saved}) == 3 and len(saved) == 4

    out = _optimize(
        "--proposer", "replay", "--replay-from", str(saved_dir), "--branches", "1",
        "--run-dir", str(again_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    events = _log(again_dir)
    assert [e["branch_id"] for e in events if e["kind"] == "branch_opened"] == ["b1"]
    received = {e["attempt"]: e for e in events if e["kind"] == "proposal_received"}
    verified = {e["attempt"] for e in events if e["kind"] == "verdict_ready"}
    # every saved source, in the saved order, proposed again and verified
    assert [received[n]["source_hash"] for n in sorted(received)] == [
        e["source_hash"] for e in sorted(saved, key=lambda e: e["attempt"])
    ]
    assert verified == set(received)
    assert not any(e["kind"] == "notice" and "not re-verified" in e["message"] for e in events)

    # a budget too small for the saved run: the sources left out are named, once
    out = _optimize(
        "--proposer", "replay", "--replay-from", str(saved_dir), "--branches", "1",
        "--max-attempts", "2", "--run-dir", str(short_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    notices = [e["message"] for e in _log(short_dir) if e["kind"] == "notice"]
    left = [m for m in notices if "not re-verified" in m]
    assert left == [f"replay: 2 saved source(s) of {saved_dir} were not re-verified (#3, #4)"]
    assert left[0] in out.stdout


def test_the_throughput_bench_deals_a_saved_run_round_robin(tmp_path):
    """bench/verify_paths.py re-verifies a committed run's candidates dealt over three
    branches: every saved source once, the branches within one of each other, each
    source still the one the log hashed."""
    from helpers import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import verify_paths
    finally:
        sys.path.remove(str(ROOT / "bench"))
    saved = read_events(ROOT / verify_paths.RUNS["rmsnorm"] / "events.jsonl")
    hashes = sorted(e["source_hash"] for e in saved if e["kind"] == "proposal_received")
    replay = ReplayProposer(run_dir=str(verify_paths.dealt_copy("rmsnorm", tmp_path)))
    labels = replay.strategies({"name": "rmsnorm"}, verify_paths.BRANCHES)
    assert len(labels) == verify_paths.BRANCHES
    sizes = [len(replay._queues[label]) for label in labels]
    assert sum(sizes) == len(hashes) and max(sizes) - min(sizes) <= 1
    proposed = []
    for i in range(len(hashes)):
        proposal = asyncio.run(replay.propose(ctx(labels[i % len(labels)])))
        proposed.append(_sha(proposal.source))
    assert sorted(proposed) == hashes
