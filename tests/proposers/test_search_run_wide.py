"""The search proposes no kernel twice in a run: not on one branch, not across branches
(branches that changed family once walked each other's paths, a third of a default GPU
run's attempts verified again), not after a resume. A branch that changes to a family
another branch walked goes on from that branch's best point of it, and says so: the
move names the attempt, which is the proposal's parent."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from kernelladder.engine.proposers.search import SearchProposer
from kernelladder.engine.protocols import Proposal, ProposalContext, ProposerExhausted
from kernelladder.engine.record.upcast import search_header as parse_header
from kernelladder.ops.registry import get_op

STAGNATION = 8  # the default run's stagnation rule
START = (
    "import triton\n\ndef kernel(x, weight):\n    return x\n"  # the op's start: not a search source
)


def _sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _speed(key: str) -> float:
    """A made-up speedup per grid point, the same each time (the judge of these tests)."""
    return 1.0 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 1000 / 1000


class Run:
    """Plays the engine for several branches: one attempt counter, each branch's history
    and best (its parent), branches asked in turn; a branch whose proposer is exhausted
    stops."""

    def __init__(self, op: str, labels: list[str], device: str = "cuda", judge=None):
        self.proposer = SearchProposer()
        self.op = get_op(op).describe()
        self.device = device
        self.judge = judge or (lambda p: _speed(p.meta["key"]))
        self.branches = {f"b{i + 1}": label for i, label in enumerate(labels)}
        self.history: dict[str, list[dict[str, Any]]] = {b: [] for b in self.branches}
        self.best: dict[str, int | None] = dict.fromkeys(self.branches)
        self.sources: dict[int, str] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.proposals: dict[int, tuple[str, Proposal]] = {}
        self.done: set[str] = set()
        self.stagnation: dict[str, int] = dict.fromkeys(self.branches, 0)

    def context(self, bid: str) -> ProposalContext:
        parent = self.best[bid]
        return ProposalContext(
            op=self.op,
            branch_id=bid,
            strategy=self.branches[bid],
            parent_attempt=parent,
            parent_source=self.sources.get(parent, START) if parent else START,
            parent_meta=dict(self.proposals[parent][1].meta) if parent else {},
            parent_verdict=self.verdicts.get(parent) if parent else None,
            feedback={},
            dead_ends=(),
            hints="",
            history=tuple(self.history[bid]),
            device=self.device,
            stagnation=self.stagnation[bid],
            stagnation_limit=STAGNATION,
        )

    def step(self, bid: str) -> int | None:
        try:
            p = asyncio.run(self.proposer.propose(self.context(bid)))
        except ProposerExhausted:
            self.done.add(bid)
            return None
        n = len(self.sources) + 1
        self.sources[n] = p.source
        self.proposals[n] = (bid, p)
        speed = self.judge(p) if self.device == "cuda" else None
        verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": speed}
        self.verdicts[n] = verdict
        self.history[bid].append(
            {
                "attempt": n,
                "move": p.move,
                "meta": dict(p.meta),
                "verdict": "pass",
                "speedup": speed,
            }
        )
        best = self.best[bid]
        if best is None or (speed or 0) > (self.verdicts[best]["speedup"] or 0):
            self.best[bid] = n
            self.stagnation[bid] = 0
        else:
            self.stagnation[bid] += 1
        return n

    def go(self, attempts: int) -> None:
        while len(self.sources) < attempts and len(self.done) < len(self.branches):
            for bid in self.branches:
                if bid not in self.done and len(self.sources) < attempts:
                    self.step(bid)


def _family(source: str) -> str:
    header = parse_header(source)
    assert header is not None
    return header["family"]


def test_three_branches_on_a_gpu_never_verify_a_kernel_twice():
    run = Run("int8_matmul", ["tiled", "persistent", "split-k"])
    run.go(60)
    assert len(run.sources) == 60
    hashes = [_sha(s) for s in run.sources.values()]
    assert len(set(hashes)) == len(hashes)
    keys = [p.meta["key"] for _, p in run.proposals.values()]
    assert len(set(keys)) == len(keys)


def test_a_branch_entering_a_family_another_walked_goes_on_from_its_best_point():
    run = Run("int8_matmul", ["tiled", "persistent", "split-k"])
    run.go(60)
    entered = [
        (n, bid, p)
        for n, (bid, p) in run.proposals.items()
        if p.meta.get("from_family") and " from #" in p.move.split(":", 1)[0]
    ]
    assert entered, "no branch changed to a family another branch had walked"
    for n, bid, p in entered:
        parent = p.base_attempt
        assert isinstance(parent, int) and parent < n
        parent_bid, _ = run.proposals[parent]
        assert parent_bid != bid  # another branch's attempt ...
        assert _family(run.sources[parent]) == p.meta["family"]  # ... of the family entered
        assert p.move.startswith(
            f"family {p.meta['from_family']} -> {p.meta['family']} from #{parent}: "
        )
        # the search rates the move against that parent (a step of a verified point); the
        # change of the branch's line is the engine's to rate (tests/engine/test_undo_cost.py)
        assert p.undo_cost == "low" and f"verified attempt #{parent}" in p.undo_reason
        # the source is the parent's point with the move applied: one parameter or a linked pair
        before = parse_header(run.sources[parent])["params"]
        after = parse_header(p.source)["params"]
        assert 1 <= sum(before[k] != after[k] for k in after) <= 2
        # it is the best point of that family on the other branches that the proposer had
        # read the verdict of (a branch's history is read as it proposes again)
        read = [
            m for m in range(1, n)
            if _family(run.sources[m]) == p.meta["family"]
            and run.proposals[m][0] != bid
            and any(run.proposals[k][0] == run.proposals[m][0] for k in range(m + 1, n))
        ]  # fmt: skip
        assert parent == max(read, key=lambda m: (run.verdicts[m]["speedup"], -m))


def test_cpu_runs_walk_distinct_points_on_every_branch_too():
    run = Run("rmsnorm", ["multi-row", "one-row-per-program", "two-pass"], device="cpu")
    run.go(45)
    hashes = [_sha(s) for s in run.sources.values()]
    assert len(hashes) == 45 and len(set(hashes)) == 45


def test_a_resumed_run_does_not_propose_what_it_proposed_before():
    first = Run("softmax", ["one-pass", "online", "persistent"])
    first.go(24)
    proposed = [(first.branches[bid], _sha(p.source)) for bid, p in first.proposals.values()]
    # the resumed run's proposer knows only the hashes; its branches have not read their
    # histories back yet (each reads its own as it proposes)
    again = Run("softmax", ["one-pass", "online", "persistent"])
    again.proposer.resumed(again.op, 3, proposed)
    again.go(24)
    before = {h for _, h in proposed}
    assert not before & {_sha(s) for s in again.sources.values()}


def test_two_copies_of_one_family_start_apart():
    """Branches beyond the number of families copy one ("one-pass#2"): the copy's first
    proposal is not the family's start the first copy just proposed."""
    run = Run("softmax", ["one-pass", "one-pass#2"])
    first = run.proposals[run.step("b1")][1]
    second = run.proposals[run.step("b2")][1]
    assert first.source != second.source
    assert first.meta["family"] == second.meta["family"] == "one-pass"
    # the first copy's start has no attempt number the proposer has read: a rewrite into
    # the family at a point beside it, made from the parent the branch was shown
    assert second.move.startswith("rewrite as one-pass") and second.base_attempt is None


def test_the_rate_bench_counts_kernels_verified_twice_in_a_saved_run():
    """bench/default_rate.py's "repeats": the committed H200 int8_matmul search (recorded
    before the search looked across branches) verified 12 of its 38 kernels a second time;
    the CPU example none."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "default_rate", root / "bench" / "default_rate.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert (
        bench.measure(root / "tests" / "data" / "old-logs" / "h200-int8-matmul-search-2026-12-03")[
            "repeats"
        ]
        == 12
    )
    assert bench.measure(root / "examples" / "cpu-rmsnorm-run")["repeats"] == 0
