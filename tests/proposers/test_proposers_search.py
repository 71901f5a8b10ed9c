"""The built-in search proposer: deterministic, never repeats on a branch, reacts to the
verifier's feedback, classifies undo costs, runs out cleanly, refuses KernelBench."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.search import KERNELBENCH_MESSAGE, SearchProposer
from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    Proposer,
    ProposerError,
    ProposerExhausted,
)
from kernelladder.engine.record.upcast import search_header as parse_header
from kernelladder.ops.family import Family, Param
from kernelladder.ops.registry import get_op

RMSNORM = get_op("rmsnorm").describe()
START = "import triton\n\ndef kernel(x, weight):\n    return x\n"  # a non-search parent


def ctx(
    op: dict[str, Any] = RMSNORM,
    *,
    strategy: str = "multi-row",
    parent: int | None = None,
    source: str = START,
    verdict: dict[str, Any] | None = None,
    history: tuple[dict[str, Any], ...] = (),
    dead_ends: tuple[str, ...] = (),
    device: str = "cuda",
    branch: str = "b1",
    meta: dict[str, Any] | None = None,
) -> ProposalContext:
    return ProposalContext(
        op=op,
        branch_id=branch,
        strategy=strategy,
        parent_attempt=parent,
        parent_source=source,
        parent_verdict=verdict,
        feedback={},
        dead_ends=dead_ends,
        hints="",
        history=history,
        device=device,
        parent_meta=meta or {},
    )


def propose(proposer: SearchProposer, c: ProposalContext) -> Proposal:
    return asyncio.run(proposer.propose(c))


def passed(speedup: float | None = None, timings: list | None = None) -> dict[str, Any]:
    return {
        "verdict": "pass",
        "gate": None,
        "gates": {},
        "speedup": speedup,
        "timings": timings or [],
    }


def failed(gate: str, detail: str = "") -> dict[str, Any]:
    return {
        "verdict": "fail",
        "gate": gate,
        "gates": {gate: {"status": "fail", "detail": detail}},
        "speedup": None,
    }


class Driver:
    """Plays the engine: numbers attempts, keeps each branch's best as the parent."""

    def __init__(self, proposer: SearchProposer, strategy: str, device: str = "cuda"):
        self.proposer, self.strategy, self.device = proposer, strategy, device
        self.sources: dict[int, str] = {}
        self.metas: dict[int, dict] = {}  # each proposal's meta, as the log records it
        self.verdicts: dict[int, dict] = {}
        self.history: list[dict] = []
        self.best: int | None = None

    def step(self, judge) -> Proposal:
        parent = self.best
        p = propose(
            self.proposer,
            ctx(
                strategy=self.strategy,
                parent=parent,
                source=self.sources.get(parent, START),
                meta=self.metas.get(parent),
                verdict=self.verdicts.get(parent),
                history=tuple(self.history),
                device=self.device,
            ),
        )
        n = len(self.sources) + 1
        self.sources[n] = p.source
        self.metas[n] = dict(p.meta)
        verdict = judge(p)
        self.verdicts[n] = verdict
        self.history.append(
            {
                "attempt": n,
                "move": p.move,
                "verdict": verdict["verdict"],
                "speedup": verdict["speedup"],
            }
        )
        if verdict["verdict"] == "pass" and (
            self.best is None
            or (verdict["speedup"] or 0) > (self.verdicts[self.best]["speedup"] or 0)
        ):
            self.best = n
        return p


def test_get_proposer_builds_each_kind_and_rejects_unknown_names():
    assert isinstance(get_proposer("search"), Proposer)
    assert get_proposer("search", model="ignored").name == "search"
    with pytest.raises(ValueError, match="unknown proposer 'nope'"):
        get_proposer("nope")


def test_strategies_are_distinct_family_labels():
    s = SearchProposer()
    assert s.strategies(RMSNORM, 3) == ["multi-row", "one-row-per-program", "two-pass"]
    labels = s.strategies(get_op("softmax").describe(), 6)
    assert len(set(labels)) == 6 and labels[:4] == ["one-pass", "online", "persistent", "split-row"]
    assert labels[4:] == ["one-pass#2", "online#2"]


def test_kernelbench_problems_are_refused_with_one_fatal_line():
    kb = {"name": "problem.py", "kind": "kernelbench", "signature": "ModelNew(...)"}
    s = SearchProposer()
    with pytest.raises(ProposerError) as info:
        s.strategies(kb, 3)
    assert info.value.fatal and str(info.value) == KERNELBENCH_MESSAGE
    assert "--proposer api or code" in KERNELBENCH_MESSAGE
    with pytest.raises(ProposerError) as info:
        propose(s, ctx(kb))
    assert info.value.fatal and "\n" not in str(info.value)


def test_first_move_rewrites_the_parent_into_the_branch_family():
    p = propose(SearchProposer(), ctx(strategy="persistent"))
    header = parse_header(p.source)
    assert header["family"] == "persistent" and p.meta["family"] == "persistent"
    assert p.undo_cost == "medium" and p.strategy == "persistent"
    assert "def kernel(x, weight)" in p.source


def test_cpu_exploration_is_deterministic_and_never_repeats():
    def run() -> list[str]:
        d = Driver(SearchProposer(), "one-row-per-program", device="cpu")
        return [d.step(lambda p: passed(None)).meta["key"] for _ in range(25)]

    first = run()
    assert len(set(first)) == len(first)
    assert first == run()


def test_a_faster_parent_becomes_the_base():
    d = Driver(SearchProposer(), "multi-row")
    d.step(lambda p: passed(5.0))  # the family's start
    d.step(lambda p: passed(6.0))  # first single-parameter move: better
    third = d.step(lambda p: passed(4.0))
    assert third.meta["base_attempt"] == 2
    assert third.undo_cost == "low" and "#2" in third.undo_reason
    fourth = d.step(lambda p: passed(4.0))  # #3 was slower: #2 stays the base
    assert fourth.meta["base_attempt"] == 2


def test_the_move_that_improved_the_base_is_tried_again_first():
    from kernelladder.engine.proposers.search_memory import Trial
    from kernelladder.engine.proposers.search_moves import ordered_moves as _ordered_moves

    family = next(f for f in SearchProposer()._families["rmsnorm"] if f.name == "multi-row")
    plain = Trial("k", family.name, dict(family.start), 0, status="pass", speedup=2.0)
    assert [(p.name, d) for p, d in _ordered_moves(family, family.params, plain, 0, None, False)][
        0
    ] == ("ROWS", 1)
    improved = Trial(
        "k2", family.name, dict(family.start), 1, status="pass", speedup=3.0, moved=(("EPT", -1),)
    )
    first = _ordered_moves(family, family.params, improved, 0, None, False)[0]
    assert (first[0].name, first[1]) == ("EPT", -1)


def test_a_failing_parent_leads_to_a_different_move_from_the_best():
    s = SearchProposer()
    first = propose(s, ctx())
    second = propose(s, ctx(parent=1, source=first.source, meta=first.meta, verdict=passed(5.0)))
    # the engine hands the failed attempt back as context: the search moves elsewhere
    third = propose(
        s,
        ctx(
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=passed(5.0),
            history=(
                {"attempt": 2, "move": second.move, "verdict": "fail", "gate": "correctness"},
            ),
        ),
    )
    assert third.meta["key"] != second.meta["key"]
    assert third.meta["base_attempt"] == 1
    assert third.move != second.move


def test_resource_failures_shrink_resource_hungry_parameters_first():
    s = SearchProposer()
    first = propose(s, ctx(strategy="flash-split", op=get_op("attention").describe()))
    attention = get_op("attention").describe()
    second = propose(
        s,
        ctx(
            op=attention,
            strategy="flash-split",
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=passed(3.0),
        ),
    )
    third = propose(
        s,
        ctx(
            op=attention,
            strategy="flash-split",
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=passed(3.0),
            history=(
                {
                    "attempt": 2,
                    "move": second.move,
                    "verdict": failed("crash", "out of resource: shared memory"),
                },
            ),
        ),
    )
    old, new = first.meta["params"], third.meta["params"]
    changed = [k for k in new if new[k] != old[k]]
    assert len(changed) == 1
    family = next(f for f in SearchProposer()._families["attention"] if f.name == "flash-split")
    p = family.param(changed[0])
    assert p.resource and p.values.index(new[changed[0]]) < p.values.index(old[changed[0]])


def _timings(big_fraction: float, small_vs_best: float) -> list[dict]:
    return [
        {
            "label": "big",
            "candidate_ms": 1.0,
            "floor_ms": 0.9,
            "floor_fraction": big_fraction,
            "reference_ms": 9.0,
            "baselines_ms": {"lib": 1.1},
        },
        {
            "label": "small",
            "candidate_ms": 0.02,
            "floor_ms": 0.001,
            "floor_fraction": 0.05,
            "reference_ms": 0.05,
            "baselines_ms": {"lib": 0.02 * small_vs_best},
        },
    ]


@pytest.mark.parametrize(
    ("big_fraction", "small_vs_best", "focus"), [(0.95, 0.5, "small"), (0.6, 2.0, "large")]
)
def test_feedback_focus_moves_the_parameters_of_the_slow_shapes_first(
    big_fraction, small_vs_best, focus
):
    s = SearchProposer()
    first = propose(s, ctx(strategy="one-row-per-program"))
    verdict = passed(3.0, _timings(big_fraction, small_vs_best))
    second = propose(
        s,
        ctx(
            strategy="one-row-per-program",
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=verdict,
        ),
    )
    family = next(
        f for f in SearchProposer()._families["rmsnorm"] if f.name == "one-row-per-program"
    )
    assert family.params[0].focus == "all"  # without feedback EPT would move first
    changed = [k for k, v in second.meta["params"].items() if v != first.meta["params"][k]]
    assert family.param(changed[0]).focus == focus


def test_vetoed_moves_are_dead_ends_and_not_proposed_again():
    s = SearchProposer()
    first = propose(s, ctx())
    second = propose(s, ctx(parent=1, source=first.source, meta=first.meta, verdict=passed(2.0)))
    third = propose(
        s,
        ctx(
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=passed(2.0),
            dead_ends=(second.move,),
        ),
    )
    assert third.move != second.move
    # a fresh proposer (e.g. after a resume) also avoids the dead end, knowing only the move
    fresh = propose(
        SearchProposer(),
        ctx(
            parent=1,
            source=first.source,
            meta=first.meta,
            verdict=passed(2.0),
            dead_ends=(second.move,),
        ),
    )
    assert fresh.move != second.move


def test_history_with_recorded_points_rebuilds_the_tried_set_after_a_resume():
    d = Driver(SearchProposer(), "one-row-per-program")
    for _ in range(4):
        d.step(lambda p: passed(1.0))
    tried = {parse_header(src)["params"].__repr__() for src in d.sources.values()}
    history = tuple({**h, "meta": d.metas[h["attempt"]]} for h in d.history)
    fresh = SearchProposer()
    p = propose(
        fresh,
        ctx(
            strategy="one-row-per-program",
            parent=1,
            source=d.sources[1],
            meta=d.metas[1],
            verdict=passed(1.0),
            history=history,
        ),
    )
    assert repr(p.meta["params"]) not in tried


# --- a tiny grid: exhaustion and the family switch -----------------------------------------

BODY = "def kernel(x, weight):\n    return x\n"
TINY = (
    Family(
        "rmsnorm",
        "alpha",
        "first tiny family",
        (Param("A", (1, 2)), Param("B", ("x", "y"), structural=True)),
        {"A": 1, "B": "x"},
        BODY,
    ),
    Family(
        "rmsnorm", "beta", "second tiny family", (Param("C", (True, False)),), {"C": True}, BODY
    ),
)


def test_a_tiny_grid_is_walked_once_then_exhausted():
    s = SearchProposer(families={"rmsnorm": TINY}, cross_family=False)
    d = Driver(s, "alpha")
    moves = [d.step(lambda p: passed(1.0)) for _ in range(4)]
    assert len({m.meta["key"] for m in moves}) == 4
    costs = [m.undo_cost for m in moves]
    assert costs[0] == "medium"  # rewrite into the family
    assert "low" in costs and "medium" in costs[1:]  # A is a parameter, B is structural
    with pytest.raises(ProposerExhausted):
        d.step(lambda p: passed(1.0))


def test_a_used_up_family_leads_to_a_family_change_that_says_why():
    s = SearchProposer(families={"rmsnorm": TINY})
    d = Driver(s, "alpha")
    for _ in range(4):
        d.step(lambda p: passed(1.0))
    switch = d.step(lambda p: passed(1.0))
    # the engine rates the change of the branch's line high (gating.py) with this why
    assert switch.meta["family"] == "beta" and switch.meta["from_family"] == "alpha"
    assert switch.meta["line_why"] == "every point of alpha in reach was tried"
    assert switch.move.startswith("family alpha -> beta")
    d.step(lambda p: passed(1.0))
    with pytest.raises(ProposerExhausted):
        d.step(lambda p: passed(1.0))


def test_unknown_branch_labels_start_from_the_first_family():
    p = propose(SearchProposer(), ctx(strategy="my own idea"))
    assert p.meta["family"] == "multi-row" and p.strategy == "my own idea"


def test_linked_parameters_move_together_right_after_the_single_steps():
    from kernelladder.engine.proposers.search_moves import rings as _rings

    family = next(f for f in SearchProposer()._families["attention"] if f.name == "flash-tma")
    assert ("BLOCK_M", "NUM_WARPS") in family.links
    base = {**family.start, "BLOCK_M": 128, "NUM_WARPS": 8}
    params = list(family.params)
    moves = [(p, d) for p in params for d in (+1, -1)]
    points = [(point, moved) for point, moved in _rings(family, base, moves, params)]
    first_pair = next(i for i, (_, m) in enumerate(points) if len(m) == 2)
    assert first_pair > 0 and all(len(m) == 1 for _, m in points[:first_pair])
    point, moved = points[first_pair]
    assert moved == (("BLOCK_M", -1), ("NUM_WARPS", -1))
    assert (point["BLOCK_M"], point["NUM_WARPS"]) == (64, 4)
    assert {k: v for k, v in point.items() if k not in ("BLOCK_M", "NUM_WARPS")} == {
        k: v for k, v in base.items() if k not in ("BLOCK_M", "NUM_WARPS")
    }


def test_a_link_must_name_the_familys_parameters():
    with pytest.raises(ValueError, match="links name no parameter"):
        Family(
            op="rmsnorm",
            name="x",
            summary="x",
            params=(Param("A", (1, 2)),),
            start={"A": 1},
            body="",
            links=(("A", "B"),),
        )
