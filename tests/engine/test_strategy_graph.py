"""The strategy graph (engine/graph.py), folded with the run state, answers every lineage
question as a brute-force walk of the recorded events does, on every saved log."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelladder.engine.record import events as ev
from kernelladder.engine.record import graph as lineage_graph
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold

ROOT = Path(__file__).resolve().parents[2]
LOGS = sorted(p.parent for p in (ROOT / "tests" / "data").rglob("events.jsonl"))
LOGS += sorted(p.parent for p in (ROOT / "examples").rglob("events.jsonl"))


def _walk(events: list[ev.Event]) -> tuple[dict, dict, dict, list]:
    """parent, branch -> attempts, branch -> from_attempt, branches in opening order,
    straight from the events, without the fold or the graph."""
    parent: dict[int, int | None] = {}
    holds: dict[str, list[int]] = {}
    opened: dict[str, int | None] = {}
    for e in events:
        if isinstance(e, ev.BranchOpened):
            opened[e.branch_id] = e.from_attempt
            holds.setdefault(e.branch_id, [])
        elif isinstance(e, ev.ProposalReceived):
            parent[e.attempt] = e.parent_attempt
            holds.setdefault(e.branch_id, []).append(e.attempt)
    return parent, holds, opened, list(opened)


def _brute_subtree(holds: dict, opened: dict, order: list, branch_id: str) -> list[str]:
    out = [branch_id]
    i = 0
    while i < len(out):
        owned = set(holds.get(out[i], []))
        for b in order:
            if b not in out and opened[b] is not None and opened[b] in owned:
                out.append(b)
        i += 1
    return out


@pytest.mark.parametrize("run_dir", LOGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_lineage_answer_agrees_with_a_walk_of_the_events(run_dir: Path):
    events = read_events(run_dir)
    g = lineage_graph.of(fold(events))
    parent, holds, opened, order = _walk(events)
    assert parent, "a saved log with no attempt tells nothing"
    for n, p in parent.items():
        assert lineage_graph.parent(g, n) == p
        line, node = [], n
        while node is not None and node not in line:
            line.append(node)
            node = parent.get(node)
        assert lineage_graph.lineage(g, n) == line
        assert lineage_graph.ancestors(g, n) == set(line[1:])
    for b in order:
        assert lineage_graph.branch_attempts(g, b) == holds[b]
        assert lineage_graph.opened_from(g, b) == opened[b]
        assert lineage_graph.subtree_branches(g, b) == _brute_subtree(holds, opened, order, b)
    from_start = [b for b in order if opened[b] is None]
    assert lineage_graph.branches_opened_from(g, None) == from_start


def test_a_prune_takes_the_branches_opened_from_its_attempts_in_the_order_opened():
    events = [
        ev.BranchOpened(branch_id="b1", strategy="a", from_attempt=None),
        ev.ProposalReceived(branch_id="b1", attempt=1, parent_attempt=None, source_hash="x",
                            strategy="a", move="m", undo_cost="low", undo_reason="r",
                            proposer="search"),
        ev.ProposalReceived(branch_id="b1", attempt=2, parent_attempt=1, source_hash="y",
                            strategy="a", move="m", undo_cost="low", undo_reason="r",
                            proposer="search"),
        ev.BranchOpened(branch_id="b2", strategy="c", from_attempt=2),
        ev.BranchOpened(branch_id="b3", strategy="d", from_attempt=1),
        ev.ProposalReceived(branch_id="b3", attempt=3, parent_attempt=1, source_hash="z",
                            strategy="d", move="m", undo_cost="low", undo_reason="r",
                            proposer="search"),
        ev.BranchOpened(branch_id="b4", strategy="e", from_attempt=3),
        ev.BranchOpened(branch_id="b5", strategy="f", from_attempt=None),
    ]  # fmt: skip
    state = fold(events)
    assert state.subtree_branches("b1") == ["b1", "b2", "b3", "b4"]
    assert state.subtree_branches("b3") == ["b3", "b4"]
    assert lineage_graph.lineage(lineage_graph.of(state), 3) == [3, 1]
    assert lineage_graph.ancestors(lineage_graph.of(state), 2) == {1}
