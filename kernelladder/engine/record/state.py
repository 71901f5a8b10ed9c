"""Run state as a deterministic fold over the event log.

`apply(state, event)` folds one event in place (O(1), no I/O, no clock) and returns the
state; `fold(events)` folds a whole log. The live engine, `kernelladder replay`,
`optimize --resume` and the TUI use exactly this fold, so a replayed log reproduces the
final state of the live run. Keep a snapshot by folding again (it is cheap), not by
holding on to a state that is still being folded into.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernelladder.engine.record import events as ev
from kernelladder.engine.record import gains, standing_rank
from kernelladder.engine.record.state_model import (  # noqa: F401 (re-exported)
    Attempt,
    AttemptStatus,
    BranchState,
    BranchStatus,
    GateState,
    NoticeState,
    RunState,
    new_state,
)

# --- the fold -------------------------------------------------------------------------


def _run_started(s: RunState, e: ev.RunStarted) -> None:
    s.run_id = e.run_id
    s.op = e.op
    s.op_kind = e.op_kind
    s.proposer = e.proposer
    s.model = e.model
    s.device = e.device
    s.gpu = e.gpu
    s.runner = e.runner
    s.speed_measured = e.speed_measured
    s.sandbox = e.sandbox
    s.settings = dict(e.settings)
    s.target = e.target
    s.hints = str(e.settings.get("hints") or "")
    s.started_ts = e.ts
    s.segment_start = e.ts


def _run_reopened(s: RunState, e: ev.RunReopened) -> None:
    if s.segment_start is not None:
        s.segments_s += max(0.0, s.last_ts - s.segment_start)
    s.segment_start = e.ts
    s.reopened += 1
    s.settings.update(e.settings)
    if "target" in e.settings:
        s.target = e.settings["target"]
    s.finished = False
    s.finish_reason = None
    s.finish_detail = ""
    s.stopping = False
    s.stop_reason = None
    for b in s.branches.values():
        b.stopped = False
        b.requesting = False
        b.running = None
    for n in e.requeued_attempts:
        a = s.attempts.get(n)
        if a is not None and a.status in (AttemptStatus.RUNNING, AttemptStatus.CANCELLED):
            s.attempts[n] = a.evolve(status=AttemptStatus.PROPOSED)
    # a gate left pending is asked again: its timeout (as this session sets it) restarts
    for gid in s.pending_gates:
        g = s.gates[gid]
        g.asked_ts = e.ts
        if "gate_timeout_s" in e.settings:
            g.timeout_s = e.settings["gate_timeout_s"]


def _run_paused(s: RunState, e: ev.RunPaused) -> None:
    s.paused = True


def _run_resumed(s: RunState, e: ev.RunResumed) -> None:
    s.paused = False


def _target_changed(s: RunState, e: ev.TargetChanged) -> None:
    s.target = e.target
    s.settings["target"] = e.target


def _notice(s: RunState, e: ev.Notice) -> None:
    s.notices.append(NoticeState(e.seq, e.ts, e.level, e.message, e.branch_id))


def _stop_requested(s: RunState, e: ev.StopRequested) -> None:
    s.stopping = True
    s.stop_reason = e.reason


def _run_finished(s: RunState, e: ev.RunFinished) -> None:
    s.finished = True
    s.stopping = False
    s.finish_reason = e.reason
    s.finish_detail = e.detail
    for b in s.branches.values():
        b.requesting = False
        if not b.closed:
            b.stopped = True


def _branch_opened(s: RunState, e: ev.BranchOpened) -> None:
    b = BranchState(e.branch_id, e.strategy, e.from_attempt, e.by, e.ts)
    origin = s.attempts.get(e.from_attempt) if e.from_attempt is not None else None
    if origin is not None and origin.passed:
        b.baseline_speedup = origin.speedup
        b.baseline_noise = origin.noise
    s.branches[e.branch_id] = b


def _branch_pruned(s: RunState, e: ev.BranchPruned) -> None:
    for bid in e.pruned or (e.branch_id,):
        b = s.branches.get(bid)
        if b is not None and not b.closed:
            b.closed_as = BranchStatus.PRUNED
            b.requesting = False


def _branch_exhausted(s: RunState, e: ev.BranchExhausted) -> None:
    b = s.branches.get(e.branch_id)
    if b is not None and not b.closed:
        b.closed_as = BranchStatus.EXHAUSTED
        b.rule = e.rule
        b.detail = e.detail
        b.requesting = False


def _branch_paused(s: RunState, e: ev.BranchPaused) -> None:
    if e.branch_id in s.branches:
        s.branches[e.branch_id].paused = True


def _branch_resumed(s: RunState, e: ev.BranchResumed) -> None:
    if e.branch_id in s.branches:
        s.branches[e.branch_id].paused = False


def _hint_edited(s: RunState, e: ev.HintEdited) -> None:
    if e.branch_id is None:
        s.hints = e.text
    elif e.branch_id in s.branches:
        s.branches[e.branch_id].hints = e.text


def _proposal_requested(s: RunState, e: ev.ProposalRequested) -> None:
    if e.branch_id in s.branches:
        s.branches[e.branch_id].requesting = True


# what an attempt takes from its ProposalReceived under the same names: the move, and who
# proposed it at what cost
_MOVE = ("branch_id", "strategy", "family", "move", "undo_cost", "undo_reason", "source_hash")
_SPENT = ("proposer", "model", "tokens_in", "tokens_out", "cost_usd")


def _proposal_received(s: RunState, e: ev.ProposalReceived) -> None:
    same = {name: getattr(e, name) for name in _MOVE + _SPENT}
    a = Attempt(
        number=e.attempt, parent=e.parent_attempt, meta=dict(e.meta), received_ts=e.ts, **same
    )
    s.attempts[e.attempt] = a
    s.attempts_used += 1
    if e.undo_cost != ev.UNDO_HIGH:  # not gated: its family is the branch's line from now
        _admit(s, a, approved=False)
    s.cost_usd += e.cost_usd
    s.tokens_in += e.tokens_in
    s.tokens_out += e.tokens_out
    b = s.branches.get(e.branch_id)
    if b is not None:
        b.attempts.append(e.attempt)
        b.requesting = False
        b.proposal_failures = 0
        b.cost_usd += e.cost_usd
        b.tokens_in += e.tokens_in
        b.tokens_out += e.tokens_out


def _proposal_failed(s: RunState, e: ev.ProposalFailed) -> None:
    s.proposal_failures += 1
    s.cost_usd += e.cost_usd  # a rejected reply was paid for all the same
    s.tokens_in += e.tokens_in
    s.tokens_out += e.tokens_out
    b = s.branches.get(e.branch_id)
    if b is not None:
        b.requesting = False
        b.proposal_failures += 1
        b.cost_usd += e.cost_usd
        b.tokens_in += e.tokens_in
        b.tokens_out += e.tokens_out


def _gate_raised(s: RunState, e: ev.GateRaised) -> None:
    s.gates[e.gate_id] = GateState(
        e.gate_id, e.branch_id, e.attempt, e.move, e.undo_cost, e.reason, e.policy,
        e.timeout_s, e.ts, asked_ts=e.ts,
    )  # fmt: skip
    s.pending_gates[e.gate_id] = None
    a = s.attempts.get(e.attempt)
    if a is not None:
        s.attempts[e.attempt] = a.evolve(status=AttemptStatus.GATED, gate_id=e.gate_id)
    b = s.branches.get(e.branch_id)
    if b is not None:
        b.pending_gate = e.gate_id


def _gate_resolved(s: RunState, e: ev.GateResolved) -> None:
    g = s.gates.get(e.gate_id)
    if g is None or not g.pending:
        return
    g.decision = e.decision
    g.by = e.by
    g.note = e.note
    s.pending_gates.pop(e.gate_id, None)
    b = s.branches.get(g.branch_id)
    if b is not None and b.pending_gate == e.gate_id:
        b.pending_gate = None
    a = s.attempts.get(g.attempt)
    if a is None:
        return
    if e.decision == "approve":
        a = s.attempts[g.attempt] = a.evolve(status=AttemptStatus.PROPOSED, approved=True)
        _admit(s, a, approved=True)
    else:
        a = s.attempts[g.attempt] = a.evolve(status=AttemptStatus.VETOED)
        if b is not None and e.by != "stop":  # a stop's veto is no verdict on the move
            b.dead_ends.append(f"{a.move} (vetoed{': ' + e.note if e.note else ''})")
            _bind_veto(s, b, a)


def _admit(s: RunState, a: Attempt, approved: bool) -> None:
    """An attempt its branch goes on with (not gated, or approved at its gate): a family
    other than the branch's line's changes the line (the family left is remembered); an
    approved move begins a line at that attempt, the base the branch builds on."""
    b = s.branches.get(a.branch_id)
    if b is None:
        return
    changed = bool(a.family and b.line_family is not None and a.family != b.line_family)
    if changed:
        b.families_left.setdefault(str(b.line_family), a.number)
        b.families_left.pop(str(a.family), None)
    if a.family:
        b.line_family = a.family
    if approved or changed:
        b.line_start = a.number
        b.line_best = None


def _bind_veto(s: RunState, b: BranchState, a: Attempt) -> None:
    """A vetoed family change closes that family on this branch; any other vetoed move
    closes that step (its move line without the "(from #N)" of its base)."""
    changed_from = vetoed_family_change(s, a)
    if changed_from is not None:
        if a.family not in b.vetoed_families:
            b.vetoed_families.append(a.family)
        return
    step = bare_move(a.move)
    if step and step not in b.vetoed_moves:
        b.vetoed_moves.append(step)


def vetoed_family_change(s: RunState, a: Attempt) -> str | None:
    """The family an attempt moved away from, when it changed its branch's line (or,
    before the branch had one, its parent's family)."""
    if not a.family:
        return None
    declared = a.meta.get("from_family") if isinstance(a.meta, dict) else None
    b = s.branches.get(a.branch_id)
    parent = s.attempts.get(a.parent) if a.parent is not None else None
    for before in (declared, b.line_family if b is not None else None, parent and parent.family):
        if before and before != a.family:
            return str(before)
    return None


def bare_move(move: str) -> str:
    """A move line without the "(from #N)" that names the attempt it started from."""
    return move.split(" (from #", 1)[0].strip()


def _attempt_started(s: RunState, e: ev.AttemptStarted) -> None:
    a = s.attempts.get(e.attempt)
    if a is not None:
        s.attempts[e.attempt] = a.evolve(status=AttemptStatus.RUNNING, runner=e.runner, slot=e.slot, started_ts=e.ts,
            retries=max(a.retries, e.retry),
        )  # fmt: skip
    b = s.branches.get(e.branch_id)
    if b is not None:
        b.running = e.attempt


def _attempt_progress(s: RunState, e: ev.AttemptProgress) -> None:
    if e.attempt in s.attempts:
        count = s.progress[e.attempt][2] if e.attempt in s.progress else 0
        s.progress[e.attempt] = (e.message, e.gate, count + 1)


def _attempt_retried(s: RunState, e: ev.AttemptRetried) -> None:
    s.retries += 1
    a = s.attempts.get(e.attempt)
    if a is not None:
        s.attempts[e.attempt] = a.evolve(retries=a.retries + 1)


def _attempt_cancelled(s: RunState, e: ev.AttemptCancelled) -> None:
    a = s.attempts.get(e.attempt)
    if a is not None and a.status != AttemptStatus.JUDGED:
        s.attempts[e.attempt] = a.evolve(status=AttemptStatus.CANCELLED)
    b = s.branches.get(e.branch_id)
    if b is not None and b.running == e.attempt:
        b.running = None


def _verdict_ready(s: RunState, e: ev.VerdictReady) -> None:
    a = s.attempts.get(e.attempt)
    if a is None:
        return
    a = s.attempts[e.attempt] = a.evolve(status=AttemptStatus.JUDGED, verdict=e.verdict, verdict_kind=e.verdict_kind,
        failed_gate=e.gate, speedup=e.speedup, floor_fraction=e.floor_fraction, noise=e.noise,
        summary=e.summary, vs_best=e.vs_best, standing_shapes=e.standing_shapes,
        standing=e.standing,
        early_stop=e.early_stop, verdict_hash=e.verdict_hash, elapsed_s=e.elapsed_s,
        judged_ts=e.ts,
    )  # fmt: skip
    s.judged += 1
    b = s.branches.get(e.branch_id)
    if b is None:
        return
    if b.running == e.attempt:
        b.running = None
    if e.verdict == "pass":
        s.passed += 1
        b.passes += 1
        in_line = b.line_start is not None and e.attempt >= b.line_start
        line_best = s.attempts.get(b.line_best) if in_line and b.line_best is not None else None
        if a.early_stop is not None:
            gain = False  # stopped early: clearly slower than the branch's best
        elif a.source_hash and a.source_hash in s.passed_sources:
            gain = False  # a kernel that passed before, measured again: no gain
        elif in_line and line_best is None:
            gain = True  # the first kernel of a line a person approved
            b.line_best = e.attempt
        elif s.speed_measured and a.vs_best is not None:
            merit = standing_rank.merit_of(a)
            ref = (
                standing_rank.merit_of(line_best)
                if line_best is not None
                else branch_reference(s, b)
            )
            gain = standing_rank.is_gain(ref, merit)
            if line_best is not None and standing_rank.better(merit, ref):
                b.line_best = e.attempt
        elif s.speed_measured:  # a log without standings: the speedup over the reference
            if line_best is not None:
                ref, ref_noise = line_best.speedup, line_best.noise
            elif b.best_speedup is not None and b.best_speedup >= (b.baseline_speedup or 0.0):
                ref, ref_noise = b.best_speedup, b.best_noise
            else:
                ref, ref_noise = b.baseline_speedup, b.baseline_noise
            gain = gains.is_gain(ref, e.speedup, e.noise, ref_noise)
            if line_best is not None and (e.speedup or 0.0) > (ref or 0.0):
                b.line_best = e.attempt
        else:
            # no speed (the CPU interpreter): no kernel is judged better than another, so
            # a line gains once, by its first passing kernel; the rest count to its end
            gain = not in_line and b.best_attempt is None
        s.passed_sources.add(a.source_hash)
        b.stagnation = 0 if gain else b.stagnation + 1
    else:
        b.fails += 1
        b.stagnation += 1
        sig = gains.failure_signature(e.gate, e.summary)
        b.failure_counts[sig] = b.failure_counts.get(sig, 0) + 1
        b.dead_ends.append(f"{a.move} ({e.gate or e.verdict_kind} failed)")


def _profile_ready(s: RunState, e: ev.ProfileReady) -> None:
    s.profiles[e.attempt] = {
        "status": e.status, "reason": e.reason, "summary": dict(e.summary), "report": e.report,
        "wall_s": e.wall_s,
    }  # fmt: skip


def _best_improved(s: RunState, e: ev.BestImproved) -> None:
    a = s.attempts.get(e.attempt)
    b = s.branches.get(e.branch_id)
    if b is not None:
        b.best_attempt = e.attempt
        b.best_speedup = e.speedup
        b.best_noise = a.noise if a is not None else None
    if e.overall:
        s.best_attempt = e.attempt
        s.best_speedup = e.speedup
        s.ranked_best = e.attempt


def _best_confirmed(s: RunState, e: ev.BestConfirmed) -> None:
    s.confirmations[e.attempt] = {
        "attempt": e.attempt,
        "held": e.held,
        "vs_best": e.vs_best,
        "recorded_vs_best": e.recorded_vs_best,
        "shapes": e.shapes,
        "noise": e.noise,
        "rounds": e.rounds,
        "detail": e.detail,
    }
    held_best = best_that_held(s)
    if held_best is not None and held_best != s.best_attempt:
        s.best_attempt = held_best
        s.best_speedup = s.attempts[held_best].speedup if held_best in s.attempts else None


def best_that_held(s: RunState) -> int | None:
    """The run's best once re-measured: the best by rank when it held (or was not
    re-measured); when it did not hold, the best-ranked re-measured attempt that held;
    when none held, the best by rank still (the summary says none held)."""
    ranked = s.ranked_best if s.ranked_best is not None else s.best_attempt
    mine = s.confirmations.get(ranked) if ranked is not None else None
    if mine is None or mine["held"]:
        return ranked
    held = {n for n, c in s.confirmations.items() if c["held"]}
    if not held:
        return ranked
    order = [n for n in ranked_passes(s) if n in held]
    return order[0] if order else min(held)


def closest_to_holding(s: RunState) -> int | None:
    """When no re-measured attempt held: the one that came closest, by its worst shape's
    re-measured vs best (the least slower), then its re-measured vs best."""
    if not s.confirmations or any(c["held"] for c in s.confirmations.values()):
        return None

    def key(c: dict[str, Any]) -> tuple[float, float]:
        ratios = [
            float(row["vs_best"])
            for row in c["shapes"].values()
            if isinstance(row, dict) and isinstance(row.get("vs_best"), int | float)
        ]
        return (min(ratios) if ratios else 0.0, c["vs_best"] or 0.0)

    return max(s.confirmations.values(), key=key)["attempt"]


def _deploy_checked(s: RunState, e: ev.DeployChecked) -> None:
    s.deploys.append({
        "seq": e.seq, "ts": e.ts, "attempt": e.attempt, "op": e.op, "model": e.model,
        "status": e.status, "summary": e.summary, "result": dict(e.result),
    })  # fmt: skip


def latest_deploys(s: RunState) -> dict[int | None, dict[str, Any]]:
    """The last deploy of each attempt (None: kernels from files)."""
    out: dict[int | None, dict[str, Any]] = {}
    for d in s.deploys:
        out[d["attempt"]] = d
    return out


_HANDLERS: dict[type[ev.Event], Any] = {
    ev.RunStarted: _run_started,
    ev.RunReopened: _run_reopened,
    ev.RunPaused: _run_paused,
    ev.RunResumed: _run_resumed,
    ev.TargetChanged: _target_changed,
    ev.Notice: _notice,
    ev.StopRequested: _stop_requested,
    ev.RunFinished: _run_finished,
    ev.BranchOpened: _branch_opened,
    ev.BranchPruned: _branch_pruned,
    ev.BranchExhausted: _branch_exhausted,
    ev.BranchPaused: _branch_paused,
    ev.BranchResumed: _branch_resumed,
    ev.HintEdited: _hint_edited,
    ev.ProposalRequested: _proposal_requested,
    ev.ProposalReceived: _proposal_received,
    ev.ProposalFailed: _proposal_failed,
    ev.GateRaised: _gate_raised,
    ev.GateResolved: _gate_resolved,
    ev.AttemptStarted: _attempt_started,
    ev.AttemptProgress: _attempt_progress,
    ev.AttemptRetried: _attempt_retried,
    ev.AttemptCancelled: _attempt_cancelled,
    ev.VerdictReady: _verdict_ready,
    ev.BestImproved: _best_improved,
    ev.BestConfirmed: _best_confirmed,
    ev.ProfileReady: _profile_ready,
    ev.DeployChecked: _deploy_checked,
}


def apply(state: RunState, event: ev.Event) -> RunState:
    """Fold one event into `state` (in place) and return it. Unknown kinds only advance
    the sequence, so an older reader survives a newer log."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(state, event)
    state.seq = event.seq
    state.events += 1
    if event.ts > state.last_ts and not event.beside_the_run:
        state.last_ts = event.ts
    return state


def fold(events: Iterable[ev.Event], state: RunState | None = None) -> RunState:
    state = new_state() if state is None else state
    for event in events:
        apply(state, event)
    return state


def improvement(state: RunState, attempt: int) -> tuple[bool, bool]:
    """(better than its branch's best, better than the run's best) for a judged attempt:
    what BestImproved the engine records after its verdict (see gains.py for the CPU)."""
    a = state.attempts[attempt]
    if not a.passed or a.early_stop is not None:  # stopped early: never a best
        return False, False
    if _passed_before(state, attempt):  # the same kernel measured again: luck, not a gain
        return False, False
    b = state.branches[a.branch_id]
    if state.speed_measured and a.speedup is not None and a.vs_best is not None:
        merit = standing_rank.merit_of(a)
        mine = state.attempts.get(b.best_attempt) if b.best_attempt is not None else None
        ref = standing_rank.merit_of(mine) if mine is not None else _origin_merit(state, b)
        best = state.attempts.get(state.best_attempt) if state.best_attempt is not None else None
        overall = best is None or standing_rank.better(merit, standing_rank.merit_of(best))
        return standing_rank.better(merit, ref), overall
    if state.speed_measured:
        if a.speedup is None:
            return False, False
        ref = b.best_speedup if b.best_speedup is not None else b.baseline_speedup
        branch = ref is None or a.speedup > ref
        overall = state.best_speedup is None or a.speedup > state.best_speedup
        return branch, overall
    return b.best_attempt is None, state.best_attempt is None


def _passed_before(state: RunState, attempt: int) -> bool:
    """Did an earlier attempt with this one's source (byte for byte) pass? A proposer may
    hand in a kernel it wrote before; its second measurement is not a better kernel."""
    digest = state.attempts[attempt].source_hash
    return bool(digest) and any(
        n < attempt and o.passed and o.source_hash == digest for n, o in state.attempts.items()
    )


def _origin_merit(state: RunState, b: BranchState) -> standing_rank.Merit | None:
    origin = state.attempts.get(b.from_attempt) if b.from_attempt is not None else None
    return standing_rank.merit_of(origin) if origin is not None and origin.passed else None


def branch_reference(state: RunState, b: BranchState) -> standing_rank.Merit | None:
    """What a branch's next attempt must beat for a gain: the better of its best so far
    and the attempt it was opened from (standing_rank's rule)."""
    mine = state.attempts.get(b.best_attempt) if b.best_attempt is not None else None
    candidates = [standing_rank.merit_of(mine)] if mine is not None else []
    origin = _origin_merit(state, b)
    if origin is not None:
        candidates.append(origin)
    ref = None
    for m in candidates:
        if ref is None or standing_rank.better(m, ref):
            ref = m
    return ref


def ranked_passes(state: RunState) -> list[int]:
    """Passing attempts with a measured speed, best first by standing_rank's rule (ties:
    the earlier attempt first)."""
    ranked: list[int] = []
    for n in sorted(state.attempts):
        a = state.attempts[n]
        if not a.passed or a.speedup is None:
            continue
        merit = standing_rank.merit_of(a)
        i = 0
        while i < len(ranked) and not standing_rank.better(
            merit, standing_rank.merit_of(state.attempts[ranked[i]])
        ):
            i += 1
        ranked.insert(i, n)
    return ranked
