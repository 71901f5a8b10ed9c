"""The search proposer does what the person steering it said: a vetoed family change
closes that family on its branch (also after a resume), a vetoed step stays a dead end,
hint directives (prefer/avoid/fix/try) shape every proposal, and a stagnating branch is
offered a change of family at a gate before it runs out.

The veto and directive runs use the real `search` proposer and the real CPU worker
(Triton interpreter, rmsnorm's tiny CPU suite). The stagnation run needs measured
speedups that stop improving, which only a GPU gives: there the verifier is a double
that reports a constant 1.0x (as tests/helpers.py explains)."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import ConstantSpeedRunner, until

from kernelladder.engine import create_run, resume_run
from kernelladder.engine.proposers.search import SearchProposer
from kernelladder.engine.protocols import ProposalContext
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.run.options import RunOptions
from kernelladder.ops.registry import get_op

RMSNORM = get_op("rmsnorm").describe()


def _options(tmp_path, **kw: Any) -> RunOptions:
    kw.setdefault("branches", 1)
    kw.setdefault("gate", "ask")
    return RunOptions(op="rmsnorm", device="cpu", run_dir=str(tmp_path / "run"), **kw)


def _received(run_dir) -> list[ev.ProposalReceived]:
    return [e for e in read_events(run_dir) if isinstance(e, ev.ProposalReceived)]


async def test_a_vetoed_family_change_is_never_proposed_again_on_its_branch(tmp_path):
    run = create_run(_options(tmp_path, max_attempts=6))
    task = asyncio.ensure_future(run.run())
    s = run.state
    await until(lambda: 1 in s.attempts and s.attempts[1].status == "running", "#1 runs", 60)
    assert s.attempts[1].family == "multi-row"
    # asked while #1 is verified, so #2 is proposed under it: a family change, gated
    await run.edit_hints("prefer two-pass")
    await until(lambda: "g1" in s.pending_gates, "gate g1", 120)
    gated = s.attempts[s.gates["g1"].attempt]
    assert gated.family == "two-pass" and gated.undo_cost == "high"
    assert "multi-row -> two-pass" in gated.move
    await run.veto("g1", note="stay with multi-row")
    state = await asyncio.wait_for(task, 300)
    assert state.finish_reason == ev.RULE_MAX_ATTEMPTS
    after = [e for e in _received(run.run_dir) if e.attempt > gated.number]
    assert len(after) >= 3
    assert all(e.family != "two-pass" for e in after)  # the hint still prefers it
    assert all("two-pass" not in e.move for e in after)
    assert not [e for e in read_events(run.run_dir) if isinstance(e, ev.GateRaised)][1:]
    assert state.branches["b1"].vetoed_families == ["two-pass"]
    # a fact of the log, not of the proposer's memory: a fresh fold (a resume) has it
    assert fold(read_events(run.run_dir)).branches["b1"].vetoed_families == ["two-pass"]

    # on the CPU the search offers another family after 4 attempts in one: decided by
    # policy here, so the resumed run does not wait at that gate
    resumed = resume_run(run.run_dir, overrides={"max_attempts": 8, "gate": "veto"})
    state = await asyncio.wait_for(resumed.run(), 300)
    late = [e for e in _received(run.run_dir) if e.attempt > 6]
    assert late and all(e.family != "two-pass" for e in late)


async def test_prefer_avoid_and_fix_directives_shape_every_proposal(tmp_path):
    hints = "prefer two-pass\navoid multi-row\nfix EPT=8\navoid MAX_WARPS=16\nkeep it simple"
    run = create_run(_options(tmp_path, max_attempts=4, branches=2, hints=hints, gate="veto"))
    state = await asyncio.wait_for(run.run(), 300)
    received = _received(run.run_dir)
    assert len(received) == 4 and {e.branch_id for e in received} == {"b1", "b2"}
    for e in received:
        assert e.family == "two-pass", e.move  # preferred; multi-row avoided
        assert e.meta["params"]["EPT"] == 8
        assert e.meta["params"]["MAX_WARPS"] != 16
        assert e.undo_cost != "high"  # nothing was tried before: a rewrite, not a change
    assert state.passed >= 1


def _ctx(history=(), **kw: Any) -> ProposalContext:
    base: dict[str, Any] = dict(
        op=RMSNORM, branch_id="b1", strategy="multi-row", parent_attempt=None,
        parent_source="def kernel(x, weight):\n    return x\n", parent_verdict=None,
        feedback={}, dead_ends=(), hints="", history=history, device="cuda",
    )  # fmt: skip
    base.update(kw)
    return ProposalContext(**base)


def test_try_directive_is_the_next_step_from_the_base():
    s = SearchProposer()
    first = asyncio.run(s.propose(_ctx()))
    verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": 1.2, "timings": []}
    nxt = asyncio.run(
        s.propose(
            _ctx(
                parent_attempt=1, parent_source=first.source, parent_meta=first.meta, parent_verdict=verdict,
                hints="try ROWS=16\nthe rest is free text",
            )
        )
    )  # fmt: skip
    assert nxt.meta["params"]["ROWS"] == 16 and nxt.move.startswith("ROWS 4->16")


def test_a_vetoed_step_is_not_proposed_again_from_the_folded_state():
    s = SearchProposer()
    first = asyncio.run(s.propose(_ctx()))
    verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": 1.2, "timings": []}
    kw = dict(
        parent_attempt=1, parent_source=first.source, parent_meta=first.meta, parent_verdict=verdict
    )
    second = asyncio.run(s.propose(_ctx(**kw)))
    fresh = asyncio.run(SearchProposer().propose(_ctx(vetoed_moves=(second.move,), **kw)))
    assert fresh.move != second.move


def test_a_vetoed_family_is_left_even_when_the_branch_label_names_it():
    p = asyncio.run(SearchProposer().propose(_ctx(vetoed_families=("multi-row",))))
    assert p.meta["family"] != "multi-row"


async def test_a_stagnating_branch_is_offered_a_family_change_at_a_gate(tmp_path):
    opts = RunOptions(
        op="rmsnorm", device="cuda", run_dir=str(tmp_path / "run"), branches=1,
        gate="ask", stagnation=4, max_attempts=30,
    )  # fmt: skip
    run = create_run(opts, runner=ConstantSpeedRunner())
    task = asyncio.ensure_future(run.run())
    s = run.state
    await until(lambda: "g1" in s.pending_gates, "gate g1", 30)
    b = s.branches["b1"]
    gated = s.attempts[s.gates["g1"].attempt]
    assert not b.closed and 0 < b.stagnation < 4  # offered before the rule ends the branch
    assert gated.undo_cost == "high" and gated.family != "multi-row"
    assert "without a gain" in gated.undo_reason
    await run.veto("g1")
    state = await asyncio.wait_for(task, 30)
    assert state.branches["b1"].rule == ev.RULE_STAGNATION
    after = [n for n in state.branches["b1"].attempts if n > gated.number]
    assert after and all(state.attempts[n].family == "multi-row" for n in after)


async def test_gate_policies_still_decide_stagnation_family_changes(tmp_path):
    opts = RunOptions(
        op="rmsnorm", device="cuda", run_dir=str(tmp_path / "run"), branches=1,
        gate="approve", stagnation=4, max_attempts=12,
    )  # fmt: skip
    run = create_run(opts, runner=ConstantSpeedRunner())
    state = await asyncio.wait_for(run.run(), 30)
    resolved = [e for e in read_events(run.run_dir) if isinstance(e, ev.GateResolved)]
    assert resolved and all((e.decision, e.by) == ("approve", "policy") for e in resolved)
    changed = [a for a in state.attempts.values() if a.meta.get("from_family")]
    assert changed and all(a.verdict == "pass" for a in changed)


def test_model_proposers_read_vetoed_families_as_dead_ends_and_hints_verbatim():
    from kernelladder.engine.proposers.prompt import build_prompt

    hints = "prefer two-pass\nfix EPT=8\nkeep the loads coalesced"
    system, user = build_prompt(_ctx(vetoed_families=("persistent",), hints=hints))
    text = system + "\n" + user
    assert "family persistent: a change to it was vetoed" in text
    assert hints in text


# --- directives on a tiny grid (every point can be listed) ---------------------------------

TINY_BODY = "def kernel(x, weight):\n    return x\n"


def _tiny():
    from kernelladder.ops.family import Family, Param

    return {
        "rmsnorm": (
            Family(
                "rmsnorm", "alpha", "first tiny family",
                (Param("A", (1, 2, 4)), Param("B", ("x", "y"))), {"A": 1, "B": "x"}, TINY_BODY,
            ),
            Family(
                "rmsnorm", "beta", "second tiny family", (Param("C", (True, False)),),
                {"C": True}, TINY_BODY,
            ),
        )
    }  # fmt: skip


def _walk(hints: str, steps: int, **kw: Any) -> list:
    """Proposals of one branch, each verified as a pass (the driver plays the engine)."""
    s = SearchProposer(families=_tiny())
    history: list[dict] = []
    out = []
    parent, source, verdict = None, "def kernel(x, weight):\n    return x\n", None
    meta: dict = {}
    for n in range(1, steps + 1):
        try:
            p = asyncio.run(
                s.propose(
                    _ctx(
                        strategy="alpha", hints=hints, history=tuple(history),
                        parent_attempt=parent, parent_source=source, parent_meta=meta,
                        parent_verdict=verdict, **kw,
                    )
                )
            )  # fmt: skip
        except Exception:
            break
        out.append(p)
        verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": 1.0, "timings": []}
        history.append({"attempt": n, "move": p.move, "verdict": "pass", "meta": p.meta})
        if parent is None:
            parent, source, meta = n, p.source, dict(p.meta)
    return out


def test_fix_and_avoid_values_hold_for_every_proposal_on_a_tiny_grid():
    proposals = _walk("fix B=y\navoid A=4", 10)
    alpha = [p for p in proposals if p.meta["family"] == "alpha"]
    assert len(alpha) == 2  # (1, y) and (2, y): every allowed alpha point, once
    assert all(p.meta["params"]["B"] == "y" and p.meta["params"]["A"] != 4 for p in alpha)


def test_avoid_family_and_prefer_family():
    assert {p.meta["family"] for p in _walk("avoid alpha", 4)} == {"beta"}
    assert _walk("prefer beta", 1)[0].meta["family"] == "beta"  # nothing tried: a rewrite
    s = SearchProposer(families=_tiny())
    first = asyncio.run(s.propose(_ctx(strategy="alpha")))
    assert first.meta["family"] == "alpha"
    verdict = {"verdict": "pass", "gate": None, "gates": {}, "speedup": 1.0, "timings": []}
    history = ({"attempt": 1, "move": first.move, "verdict": "pass", "meta": first.meta},)
    # preferring beta once alpha has been tried: a family change the person weighs at a gate
    change = asyncio.run(
        s.propose(
            _ctx(
                strategy="alpha", parent_attempt=1, parent_source=first.source, parent_meta=first.meta,
                parent_verdict=verdict, history=history, hints="prefer beta",
            )
        )
    )  # fmt: skip
    assert change.meta["family"] == "beta" and change.meta["from_family"] == "alpha"
    assert change.meta["line_why"] == "the hints prefer beta"  # the gate's reason says it


def _proposal_event(n: int, branch: str, move: str, family: str, parent=None, **meta: Any):
    return ev.ProposalReceived(
        branch_id=branch, attempt=n, parent_attempt=parent, source_hash=f"h{n}",
        strategy="alpha", move=move, undo_cost="high", undo_reason="r", proposer="search",
        family=family, meta={"family": family, **meta},
    )  # fmt: skip


def test_vetoes_fold_into_branch_state_and_a_branch_opened_by_hand_starts_open():
    events = [
        ev.BranchOpened(branch_id="b1", strategy="alpha"),
        _proposal_event(1, "b1", "rewrite as alpha", "alpha"),
        _proposal_event(2, "b1", "family alpha -> beta: x", "beta", parent=1, from_family="alpha"),
        ev.GateRaised(
            gate_id="g1",
            branch_id="b1",
            attempt=2,
            move="m",
            undo_cost="high",
            reason="r",
            policy="ask",
        ),  # fmt: skip
        ev.GateResolved(gate_id="g1", decision="veto", note="not now"),
        _proposal_event(3, "b1", "A 1->2 (from #1)", "alpha", parent=1),
        ev.GateRaised(
            gate_id="g2",
            branch_id="b1",
            attempt=3,
            move="m",
            undo_cost="high",
            reason="r",
            policy="ask",
        ),  # fmt: skip
        ev.GateResolved(gate_id="g2", decision="veto"),
        ev.BranchOpened(branch_id="b2", strategy="beta", from_attempt=1, by="user"),
    ]
    events = [e.__class__(**{**e.__dict__, "seq": i}) for i, e in enumerate(events)]
    state = fold(events)
    b1, b2 = state.branches["b1"], state.branches["b2"]
    assert b1.vetoed_families == ["beta"]  # the family change: the family is closed
    assert b1.vetoed_moves == ["A 1->2"]  # the step, without the base it started from
    assert any("not now" in d for d in b1.dead_ends)
    assert b2.vetoed_families == [] and b2.vetoed_moves == []  # opened by hand: open


async def test_a_default_cpu_run_meets_a_family_change_gate(tmp_path):
    """Without speed only a line's first passing kernel is a gain; the search offers
    another family after half the stagnation limit of attempts beyond it, so a person
    running `kernelladder-tui rmsnorm` on the CPU meets a gate."""
    run = create_run(_options(tmp_path, max_attempts=10, stagnation=8, gate="veto"))
    state = await asyncio.wait_for(run.run(), 300)
    raised = [e for e in read_events(run.run_dir) if isinstance(e, ev.GateRaised)]
    assert raised, "no gate in a default CPU run"
    gated = state.attempts[raised[0].attempt]
    assert gated.undo_cost == "high" and "family multi-row ->" in gated.move
    assert "speed is not measured here" in raised[0].reason
    after = [e for e in _received(run.run_dir) if e.attempt > gated.number]
    assert after and all(e.family != gated.family for e in after)  # the veto binds
