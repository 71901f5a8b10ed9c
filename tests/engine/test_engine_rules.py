"""Exit rules, gain, failure signatures, undo-cost escalation and the fold: pure code."""

from __future__ import annotations

import subprocess
import sys

from kernelladder.engine.protocols import Proposal
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.gains import failure_signature, is_gain, normalize_error
from kernelladder.engine.record.state import apply, fold, new_state
from kernelladder.engine.run.gating import assess_undo, fence_concerns


def test_normalize_error_blanks_numbers_addresses_paths():
    a = normalize_error("max error 3.5e-2 at index (17, 4) ptr 0x7ffd1234 in /tmp/x/k.py")
    b = normalize_error("max error 0.25 at index (1, 999) ptr 0xdeadbeef in /home/u/a.py")
    assert a == b
    assert failure_signature("correctness", "err 1") != failure_signature("load", "err 1")


def test_gain_needs_more_than_noise():
    assert is_gain(None, 0.5)
    assert not is_gain(1.0, 1.009)  # under the 1% floor
    assert is_gain(1.0, 1.011)
    assert not is_gain(1.0, 1.04, noise=0.05)
    assert not is_gain(1.0, 1.04, noise=0.0, reference_noise=0.05)
    assert not is_gain(1.0, None)


def test_fence_concerns_and_escalation():
    assert fence_concerns("import torch\n# threading is not used\nx = 1\n") == []
    assert fence_concerns("s = torch.cuda.Stream()") == ["uses a CUDA side stream"]
    assert "monkeypatches a module" in fence_concerns("torch.allclose = lambda *a: True")
    assert "touches sys.modules" in fence_concerns("import sys\nsys.modules['x'] = 1")
    common = dict(family=None, parent=1, parent_family=None, branch_id="b1")

    def move(source: str, undo_cost: str, undo_reason: str = "") -> Proposal:
        return Proposal(source, "s", "m", undo_cost, undo_reason)

    assert assess_undo(move("x=1", "low", "a param"), **common) == ("low", "a param")
    cost, why = assess_undo(move("import threading", "low"), **common)
    assert (cost, why) == ("high", "against #1: touches the fence: uses threads")
    cost, why = assess_undo(move("x", "medium"), restarts=True, **common)
    assert cost == "high" and why == "b1 leaves its line: starts again from the starting candidate"
    assert assess_undo(move("", "bogus", "r"), **common)[0] == "medium"


def _events():
    return [
        ev.RunStarted(run_id="r", op="softmax", device="cuda", speed_measured=True, seq=0, ts=100.0,
                      settings={"stagnation": 3, "max_attempts": 9}),
        ev.BranchOpened(branch_id="b1", strategy="s", seq=1, ts=100.0),
        ev.ProposalReceived(branch_id="b1", attempt=1, parent_attempt=None, source_hash="h1",
                            strategy="s", move="m1", undo_cost="low", undo_reason="",
                            proposer="p", cost_usd=0.5, seq=2, ts=101.0),
        ev.AttemptStarted(attempt=1, branch_id="b1", seq=3, ts=101.0),
        ev.VerdictReady(attempt=1, branch_id="b1", verdict="pass", verdict_kind="pass",
                        gate=None, speedup=2.0, seq=4, ts=103.0),
        ev.BestImproved(attempt=1, branch_id="b1", speedup=2.0, overall=True, seq=5, ts=103.0),
        ev.BranchOpened(branch_id="b2", strategy="t", from_attempt=1, by="user", seq=6, ts=104.0),
        ev.RunFinished(reason="user-stop", seq=7, ts=110.0),
        ev.RunReopened(seq=8, ts=500.0),
        ev.RunFinished(reason="user-stop", seq=9, ts=502.0),
    ]  # fmt: skip


def test_fold_is_deterministic_and_tracks_branches_and_time():
    s = fold(_events())
    assert s.best_attempt == 1 and s.branches["b1"].best_speedup == 2.0
    assert s.branches["b2"].baseline_speedup == 2.0 and s.branches["b2"].head == 1
    assert s.subtree_branches("b1") == ["b1", "b2"]
    assert s.elapsed_s == 12.0  # 10 s, then 2 s after the resume; the gap does not count
    assert s.cost_usd == 0.5 and s.attempts_used == 1 and s.next_attempt == 2
    assert s.branches["b1"].status == "stopped"
    # folding twice gives the same state
    s2 = new_state()
    for e in _events():
        apply(s2, e)
    assert s2 == s


def test_state_module_stays_light():
    code = (
        "import sys, kernelladder.engine.record.state, kernelladder.engine.record.summary, "
        "kernelladder.engine.record.log; "
        "print(sorted(m for m in ('torch','networkx','rich','textual') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
