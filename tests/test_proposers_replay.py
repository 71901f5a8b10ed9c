"""The `replay` proposer re-proposes a saved run's sources, per branch, in attempt order."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.replay import ReplayProposer
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
    assert replay.strategies({"name": "softmax"}, 1) == ["one-pass", "online"]
    got = [asyncio.run(replay.propose(ctx("one-pass"))) for _ in range(3)]
    assert [p.source for p in got] == [_source(1), _source(3), _source(4)]
    assert [p.undo_cost for p in got] == ["low", "high", "low"]
    assert got[0].move == "replay of #1: move 1" and got[0].meta["replayed_attempt"] == 1
    with pytest.raises(ProposerExhausted):
        asyncio.run(replay.propose(ctx("one-pass")))
    assert asyncio.run(replay.propose(ctx("online"))).source == _source(2)
    assert replay.remaining() == 0


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
