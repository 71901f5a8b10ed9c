"""RunView (app/view.py) shows RunState's fields (engine/record/state.py) as a frozen snapshot
for the widgets: a field added to RunState must be shown (a name in RUN_AS_FOLDED, or a
RunView field of its own that app/folding.py build_view fills), or be listed below as
deliberately not shown. Runs under Python 3.12 without torch, like the other app tests."""

from __future__ import annotations

from dataclasses import fields

from kernelladder.app.view import RunView
from kernelladder.engine.record.state import RunState

# RunState field -> the RunView field that shows it under another name or shape.
RENAMED = {
    "judged": "attempts_judged",
    "paused": "state",  # paused / stopping / finished fold into the run's one state word
    "stopping": "state",
    "finished": "state",
    "pending_gates": "gates",  # the pending ones, as GateViews, oldest first
    "confirmations": "best_confirmed",
    "progress": "attempts",  # each attempt's latest progress gate, as its stage  # the best's re-measure: confirmed / did not hold
}

# RunState fields the screen deliberately does not show (say why when adding one).
NOT_SHOWN = {
    "seq": "the fold's own bookkeeping (last event folded); `events` is shown",
    "reopened": "resume count: the elapsed time already spans the sessions",
    "stop_reason": "shown through finish_reason / finish_detail once the run ends",
    "notices": "notices reach the screen as toasts and the log, not through the view",
    "passed_sources": "dedup set of passing sources, engine-internal",
    "passed": "the attempts table shows each attempt's verdict",
    "proposal_failures": "engine-internal counter for the exit rules",
    "retries": "per-attempt retries are shown on AttemptView.retries",
    "lineage_cache": "lineage answers (engine/graph.py); each branch shows its from_attempt, each attempt its parent",
    "ranked_best": "shown through best_confirmed ('confirmed (#30 did not hold)')",
}


def test_every_run_state_field_is_shown_or_listed():
    state_fields = {f.name for f in fields(RunState)}
    view_fields = {f.name for f in fields(RunView)}
    missing = sorted(
        name
        for name in state_fields
        if name not in view_fields and name not in RENAMED and name not in NOT_SHOWN
    )
    assert not missing, (
        f"RunState field(s) {missing} have no RunView counterpart: add them to RUN_AS_FOLDED "
        "(app/view.py), or to NOT_SHOWN in this test with the reason"
    )


def test_the_lists_name_real_fields():
    """A stale entry would hide a field that was renamed; a shown field needs no entry."""
    state_fields = {f.name for f in fields(RunState)}
    view_fields = {f.name for f in fields(RunView)}
    assert not (set(RENAMED) | set(NOT_SHOWN)) - state_fields
    assert set(RENAMED.values()) <= view_fields
    assert not set(NOT_SHOWN) & view_fields


def test_a_paused_branch_waiting_at_a_gate_says_both():
    """Before: `b` on a branch waiting at a gate paused it, and its line still read only
    "waiting at gate" (the footer kept `b Pause br.`)."""
    from kernelladder.app import format as fmt
    from kernelladder.app import view as v
    from kernelladder.engine.record.state import BranchStatus

    gated = v.BranchView(branch_id="b2", strategy="rows", state=BranchStatus.WAITING_GATE)
    assert fmt.branch_status(gated) == "waiting at gate"
    paused = v.BranchView(
        branch_id="b2", strategy="rows", state=BranchStatus.WAITING_GATE, paused=True
    )
    assert fmt.branch_status(paused) == "paused, waiting at gate"
