"""Undo cost is one rule for every proposer: the move against its true parent, plus
whether the branch changes its line. A step made from another branch's attempt that
changes nothing hard to undo is not gated, whichever branch holds the run's best; a move
into another family is, whatever attempt it was made from; the gate's reason names which.

The rule is read through the engine's GateKeeper on a folded log (pure); the tune run is
a real one on the CPU (Triton's interpreter, examples/own-kernel), as a person starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelladder.engine.protocols import Proposal
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import fold
from kernelladder.engine.run.gate_keeper import GateKeeper
from kernelladder.engine.run.options import RunOptions

ROOT = Path(__file__).resolve().parents[2]


def _received(n, bid, parent, family=None, undo="low"):
    return ev.ProposalReceived(
        branch_id=bid, attempt=n, parent_attempt=parent, source_hash=f"h{n}", strategy="s",
        move=f"m{n}", undo_cost=undo, undo_reason="r", proposer="p", family=family,
        meta={"family": family} if family else {},
    )  # fmt: skip


def _passed(n, bid, speedup, best=False, overall=False):
    out = [
        ev.VerdictReady(
            attempt=n, branch_id=bid, verdict="pass", verdict_kind="pass", gate=None,
            speedup=speedup,
        )
    ]  # fmt: skip
    if best:
        out.append(ev.BestImproved(attempt=n, branch_id=bid, speedup=speedup, overall=overall))
    return out


def _events(families: tuple[str | None, str | None], b1_holds_best: bool) -> list[ev.Event]:
    """b1 and b2, one passing attempt each (#1 on b1, #2 on b2, of these families); the
    run's best is b1's when b1_holds_best, else b2's."""
    fast, slow = (2.0, 1.5) if b1_holds_best else (1.5, 2.0)
    return [
        ev.RunStarted(run_id="r", op="x", device="cuda", speed_measured=True),
        ev.BranchOpened(branch_id="b1", strategy="s"),
        ev.BranchOpened(branch_id="b2", strategy="t"),
        _received(1, "b1", None, families[0], undo="medium"),
        *_passed(1, "b1", fast, best=True, overall=True),
        _received(2, "b2", None, families[1], undo="medium"),
        *_passed(2, "b2", slow, best=True, overall=not b1_holds_best),
    ]


def _state(families: tuple[str | None, str | None], b1_holds_best: bool):
    return fold(_events(families, b1_holds_best))


def _rate(state, bid: str, parent: int | None, proposal: Proposal) -> tuple[str, str]:
    async def never(_: float | None) -> None:
        raise AssertionError("no wait in a rating")

    keeper = GateKeeper(state, lambda e: None, never, lambda: 0.0, "ask", RunOptions(op="x"))
    return keeper.undo_cost(bid, parent, proposal)


def _proposal(base: int | None, family: str | None = None, undo="low", why="a knob") -> Proposal:
    meta = {"family": family} if family else {}
    return Proposal(
        source="x = 1\n", strategy="s", move="BLOCK_N 1024→512", undo_cost=undo,
        undo_reason=why, meta=meta, base_attempt=base,
    )  # fmt: skip


@pytest.mark.parametrize("b1_holds_best", [True, False])
def test_a_step_from_another_branchs_attempt_keeps_the_proposers_class(b1_holds_best):
    """The own-kernel tune run's `g1 b1 #19 high: BLOCK_N 1024→512 (from #12) abandons the
    best lineage`: the same move was low on a branch that did not hold the run's best."""
    state = _state((None, None), b1_holds_best)
    assert (state.best_attempt == 1) == b1_holds_best
    assert _rate(state, "b1", 2, _proposal(2)) == ("low", "a knob")
    # within one family too: a step of b2's point of the family b1 works in
    state = _state(("alpha", "alpha"), b1_holds_best)
    assert _rate(state, "b1", 2, _proposal(2, "alpha")) == ("low", "a knob")


@pytest.mark.parametrize("b1_holds_best", [True, False])
def test_a_move_into_another_family_is_high_from_any_parent_and_names_the_line(b1_holds_best):
    state = _state(("alpha", "beta"), b1_holds_best)
    # made from b2's attempt of beta: a step against that parent, a change of b1's line
    cost, why = _rate(state, "b1", 2, _proposal(2, "beta", why="a step"))
    closed = "beta is closed to it (b2's line)"
    assert (cost, why) == (
        "high",
        f"b1's line changes: alpha -> beta, entered at #2 of b2; {closed}",
    )
    # made from b1's own attempt of alpha: the same change, without a second clause
    cost, why = _rate(state, "b1", 1, _proposal(1, "beta", undo="medium"))
    assert (cost, why) == ("high", f"b1's line changes: alpha -> beta; {closed}")


def test_the_reason_names_the_parent_when_the_move_is_high_against_it():
    state = _state(("alpha", "beta"), True)
    # a proposer's own "high" is a rating of the move against its parent
    assert _rate(state, "b1", 1, _proposal(1, "alpha", undo="high", why="a new algorithm")) == (
        "high", "against #1: rated high by the proposer: a new algorithm",
    )  # fmt: skip
    fenced = Proposal(
        source="import threading\n", strategy="s", move="m", undo_cost="low", undo_reason="r",
        base_attempt=1,
    )  # fmt: skip
    assert _rate(state, "b1", 1, fenced) == ("high", "against #1: touches the fence: uses threads")
    # a branch with no line yet, made from an attempt of another family (opened by hand)
    state = fold([*_events(("alpha", "beta"), True), ev.BranchOpened(branch_id="b3", strategy="u")])
    cost, why = _rate(state, "b3", 2, _proposal(2, "gamma", undo="medium"))
    assert (cost, why) == ("high", "against #2: changes algorithm family beta -> gamma")


@pytest.mark.timeout(300)
def test_a_tune_run_on_the_own_kernel_workspace_asks_no_gate(tmp_path):
    """A real tune run (CPU interpreter): its branches step from each other's configs, which
    is never hard to undo. On main f8a6fe1 this run raised g1 at #19 ("abandons the best
    lineage") and six more gates by #43."""
    run_dir = tmp_path / "run"
    cli = "import sys; from kernelladder.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", cli, "optimize", str(ROOT / "examples" / "own-kernel"),
         "--device", "cpu", "--max-attempts", "24", "--gate", "approve",
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=280, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    received = [e for e in log if e["kind"] == "proposal_received" and e["proposer"] == "tune"]
    branch_of = {e["attempt"]: e["branch_id"] for e in log if e["kind"] == "proposal_received"}
    crossed = [e for e in received if branch_of.get(e["parent_attempt"]) != e["branch_id"]]
    assert len(received) == 23 and len(crossed) >= 10  # many moves from other branches' configs
    # among them, moves of b1 while it held the run's best (#0: no speed on the CPU)
    assert any(e["branch_id"] == "b1" for e in crossed)
    assert [e for e in log if e["kind"] == "gate_raised"] == []
    assert {e["undo_cost"] for e in received} == {"low"}
