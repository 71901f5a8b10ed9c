"""The steering commands as pure functions (engine/run/commands.py): the state of a folded
log and the command's arguments in, the events it records out, or the one-line refusal
a person is shown. No run, no runner: the same checks Run's async methods make."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import fold
from kernelladder.engine.run import commands


def _state(*extra: ev.Event):
    script = [
        ev.RunStarted(run_id="r", op="rmsnorm"),
        ev.BranchOpened(branch_id="b1", strategy="rows"),
        ev.ProposalRequested(branch_id="b1", parent_attempt=None),
        ev.ProposalReceived(
            branch_id="b1", attempt=1, parent_attempt=None, source_hash="h", strategy="rows",
            move="risky", undo_cost=ev.UNDO_HIGH, undo_reason="rewrite", proposer="search",
        ),
        ev.GateRaised(
            gate_id="g1", branch_id="b1", attempt=1, move="risky", undo_cost=ev.UNDO_HIGH,
            reason="rewrite", policy="ask",
        ),
        ev.BranchOpened(branch_id="b2", strategy="rows", from_attempt=1, by="user"),
        *extra,
    ]  # fmt: skip
    return fold(replace(e, seq=i, ts=1.0 + i) for i, e in enumerate(script))


def test_a_prune_closes_the_open_subtree_and_vetoes_its_pending_gates():
    events = commands.prune_events(_state(), "b1")
    assert isinstance(events[0], ev.BranchPruned) and events[0].by == "user"
    assert set(events[0].pruned) == {"b1", "b2"}  # b2 was opened from b1's attempt
    assert [(e.gate_id, e.decision, e.note) for e in events[1:]] == [
        ("g1", "veto", "branch pruned")
    ]


def test_a_pruned_branch_cannot_be_pruned_again_and_an_unknown_one_is_named():
    pruned = _state(ev.BranchPruned(branch_id="b2", pruned=("b2",), by="user"))
    with pytest.raises(ValueError, match="branch b2 is already pruned"):
        commands.prune_events(pruned, "b2")
    with pytest.raises(ValueError, match="no branch b9"):
        commands.prune_events(pruned, "b9")


def test_gates_are_decided_only_while_pending():
    state = _state()
    assert commands.approve_event(state, "g1") == ev.GateResolved(
        gate_id="g1", decision="approve", by="user"
    )
    assert commands.veto_event(state, "g1", "too\n risky").note == "too risky"
    decided = _state(ev.GateResolved(gate_id="g1", decision="approve"))
    with pytest.raises(ValueError, match="no pending gate g1"):
        commands.approve_event(decided, "g1")


def test_pause_and_resume_say_why_they_do_nothing():
    state = _state()
    assert isinstance(commands.pause_event(state, None), ev.RunPaused)
    with pytest.raises(ValueError, match="the run is not paused"):
        commands.resume_event(state, None)
    paused = _state(ev.RunPaused(), ev.BranchPaused(branch_id="b1"))
    with pytest.raises(ValueError, match="the run is already paused"):
        commands.pause_event(paused, None)
    with pytest.raises(ValueError, match="branch b1 is already paused"):
        commands.pause_event(paused, "b1")
    assert commands.resume_event(paused, "b1") == ev.BranchResumed(branch_id="b1", by="user")


def test_open_branch_takes_the_next_id_and_the_attempt_label_when_none_is_given():
    opened = commands.open_branch_event(_state(), 1, "  ")
    assert (opened.branch_id, opened.strategy, opened.from_attempt) == ("b3", "rows", 1)
    assert commands.open_branch_event(_state(), 1, "two-pass").strategy == "two-pass"
    with pytest.raises(ValueError, match="no attempt 7"):
        commands.open_branch_event(_state(), 7, None)
    stopping = _state(ev.StopRequested(reason=ev.RULE_USER_STOP))
    with pytest.raises(ValueError, match="the run is stopping"):
        commands.open_branch_event(stopping, 1, None)


def test_a_target_must_be_a_positive_number_and_a_stop_names_its_rule():
    gpu = replace(_state(), speed_measured=True)
    assert commands.target_event(gpu, "1.5") == ev.TargetChanged(target=1.5, by="user")
    assert commands.target_event(gpu, None) == ev.TargetChanged(target=None, by="user")
    with pytest.raises(ValueError, match="the target must be a number"):
        commands.target_event(gpu, "fast")
    with pytest.raises(ValueError, match="the target must be a positive speedup"):
        commands.target_event(gpu, 0)
    assert commands.stop_rule("user") == (ev.RULE_USER_STOP, "")
    assert commands.stop_rule(ev.RULE_BUDGET_TIME) == (ev.RULE_BUDGET_TIME, "")
    assert commands.stop_rule("going home") == (ev.RULE_USER_STOP, "going home")


def test_a_run_that_measures_no_speed_takes_no_target_and_clears_one():
    """A CPU run: a target there could never be reached (nothing is timed)."""
    cpu = _state()
    assert not cpu.speed_measured
    with pytest.raises(ValueError, match="measures no speed"):
        commands.target_event(cpu, 1.5)
    assert commands.target_event(cpu, None) == ev.TargetChanged(target=None, by="user")


def test_no_branch_is_opened_once_the_attempts_are_spent():
    """Before: `o` after the budget was spent opened a branch that could never run."""
    spent = _state()
    spent.settings["max_attempts"] = 1  # #1 took the only attempt number
    with pytest.raises(ValueError, match="no attempt is left of the run's 1"):
        commands.open_branch_event(spent, 1, None)


def test_nothing_is_steered_before_the_start_or_after_the_end():
    with pytest.raises(ValueError, match="the run has not started yet"):
        commands.check_live(_state(), started=False, closed=False)
    with pytest.raises(ValueError, match="the run has finished"):
        commands.check_live(_state(), started=True, closed=True)
    commands.check_live(_state(), started=True, closed=False)
