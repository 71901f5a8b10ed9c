"""One frozen attempt record and one status enum: the fold replaces an attempt's record
per event, the app's view reads that record itself, and no module re-declares the
status words."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest

from kernelladder.app.folding import build_view
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import Attempt, AttemptStatus, BranchStatus, fold

ROOT = Path(__file__).resolve().parents[2]
RECEIVED = dict(
    branch_id="b1", attempt=1, parent_attempt=None, source_hash="x", strategy="s", move="m",
    undo_cost="low", undo_reason="r", proposer="search",
)  # fmt: skip


def test_the_fold_replaces_a_frozen_record_and_the_view_reads_it_as_it_is():
    events = [ev.BranchOpened(branch_id="b1", strategy="s"), ev.ProposalReceived(**RECEIVED)]
    state = fold(events)
    before = state.attempts[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.status = AttemptStatus.JUDGED  # type: ignore[misc]
    fold([ev.AttemptStarted(branch_id="b1", attempt=1, runner="local")], state)
    assert before.status is AttemptStatus.PROPOSED  # an earlier record never changes
    assert state.attempts[1].status is AttemptStatus.RUNNING
    view = build_view(state)
    assert view.attempts[1].record is state.attempts[1]
    assert isinstance(view.attempts[1].state, AttemptStatus)
    assert isinstance(view.branches[0].state, BranchStatus)
    assert view.attempts[1].speedup is None and view.attempts[1].move == "m"


def test_the_status_words_are_declared_once():
    words = {s.value for s in AttemptStatus} | {s.value for s in BranchStatus}
    # NAME = "word" or NAMES, ... = ..., "word" (the run's own RUN_ words are the view's)
    quoted = "|".join(map(re.escape, words))
    pattern = re.compile(r'^\s*(?!RUN_)[A-Z_, ]+=[^\n]*"(' + quoted + r')"\s*$', re.M)
    declared = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "kernelladder").rglob("*.py")
        if pattern.search(p.read_text()) and p.name != "state_model.py"
    ]
    assert not declared, declared
    assert dataclasses.fields(Attempt)  # the record is a dataclass, frozen
    assert Attempt.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_the_search_steps_from_the_point_its_parent_recorded_not_from_its_source():
    from kernelladder.engine.proposers.search import SearchProposer
    from kernelladder.engine.protocols import ProposalContext
    from kernelladder.ops.registry import get_op

    op = get_op("rmsnorm")
    base = dict(
        op=op.describe(), branch_id="b1", strategy="multi-row", feedback={}, dead_ends=(),
        hints="", device="cuda",
    )  # fmt: skip
    start = op.starting_source() if callable(getattr(op, "starting_source", None)) else ""
    first = asyncio.run(
        SearchProposer().propose(
            ProposalContext(**base, parent_attempt=None, parent_source=start, parent_verdict=None)
        )
    )
    verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": 2.0, "timings": []}
    # the parent's source says nothing of its point (no header): its recorded meta does
    bare = "\n".join(
        line for line in first.source.splitlines() if "kernelladder-search" not in line
    )
    nxt = asyncio.run(
        SearchProposer().propose(
            ProposalContext(
                **base, parent_attempt=1, parent_source=bare, parent_verdict=verdict,
                parent_meta=first.meta,
            )
        )
    )  # fmt: skip
    moved = [k for k, v in nxt.meta["params"].items() if v != first.meta["params"].get(k)]
    assert nxt.meta["family"] == first.meta["family"] and len(moved) >= 1
    assert nxt.base_attempt != first.base_attempt or nxt.move.endswith("(from #1)") or moved
