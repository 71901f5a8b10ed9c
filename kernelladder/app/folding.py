"""Folding events into what the screen shows, for the live run and for replay alike.

The run state is the engine's own fold (engine/record/state.py: `apply` folds one event in
place); `build_view` turns it into the frozen RunView the widgets read. `RunFold` also
keeps each attempt's log lines. `ReplayTimeline` gives the state at any position: it
folds forward from where it is, and folds again from the start for a step back (the fold
costs about a microsecond an event, far less than copying a state). Nothing here
imports textual.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.app.view import EMPTY_VIEW, RunView
from kernelladder.engine import RunState, apply, best_baseline_name, new_state, standing_counts
from kernelladder.engine import events as ev
from kernelladder.engine import state as st


def build_view(s: RunState) -> RunView:
    """The frozen view of the engine's state (the one place that knows its shape)."""
    best = s.attempts.get(s.best_attempt) if s.best_attempt is not None else None
    # the best's standing as the end's re-measure found it, once it held (the verdict's
    # own was shown after it: "4 faster 1 tie" where the re-measure said 5 faster)
    remeasured: dict = {}
    if best is not None and (c := s.confirmations.get(best.number)) and c["held"] and c["shapes"]:
        remeasured = c
    best_shapes = remeasured.get("shapes") or (best.standing_shapes if best is not None else {})
    attempts = {n: _attempt_view(a, s) for n, a in s.attempts.items()}
    branches = tuple(
        v.BranchView(
            **{name: getattr(b, name) for name in v.BRANCH_AS_FOLDED},
            branch_id=b.id,
            strategy=s.branch_label(b.id),
            state=b.status,
            rule=b.rule or "",
            attempts=tuple(b.attempts),
            paused=b.paused and not b.closed,
            is_best=best is not None and best.branch_id == b.id,
            run_paused=s.paused and not (s.finished or s.stopping),
        )
        for b in s.branches.values()
    )
    gates = tuple(
        v.GateView(
            **{name: getattr(g, name) for name in v.GATE_AS_RAISED},
            raised_ts=g.asked_ts,  # the countdown's start: a resume asks again
        )
        for gid in s.pending_gates
        if (g := s.gates.get(gid)) is not None
    )
    if s.finished:
        run_state = v.RUN_FINISHED
    elif s.stopping:
        run_state = v.RUN_STOPPING
    elif s.paused:
        run_state = v.RUN_PAUSED
    elif s.started_ts is not None:
        run_state = v.RUN_RUNNING
    else:
        run_state = v.RUN_NOT_STARTED
    return RunView(
        **{name: getattr(s, name) for name in v.RUN_AS_FOLDED},
        settings=dict(s.settings),
        state=run_state,
        finish_reason=s.finish_reason or "",
        finish_detail=s.finish_detail,
        last_ts=s.last_ts or None,
        attempts_judged=s.judged,
        best_floor_fraction=best.floor_fraction if best is not None else None,
        best_branch=best.branch_id if best is not None else None,
        best_vs_best=remeasured.get("vs_best") or (best.vs_best if best is not None else None),
        best_versus=best_baseline_name(best_shapes) if best is not None else None,
        best_standing=standing_counts(best_shapes) if best is not None else "",
        best_confirmed=_confirmed(s, s.best_attempt),
        branches=branches,
        attempts=attempts,
        gates=gates,
        profiles=dict(s.profiles),
        deploys=_deploys(s),
    )


def _deploys(s: RunState) -> dict[int, tuple[dict, ...]]:
    out: dict[int, list[dict]] = {}
    for d in s.deploys:
        if d["attempt"] is not None:
            out.setdefault(d["attempt"], []).append(d)
    return {n: tuple(ds) for n, ds in out.items()}


def _confirmed(s: RunState, attempt: int | None) -> str:
    """What the end's re-measure said of the best ("confirmed", "confirmed (#30 did not
    hold)", "none of 3 re-measured held", ...); "" when it was not re-measured."""
    from kernelladder.app.verdict_report import held_mark

    return "" if attempt is None else held_mark(s, attempt)


def _attempt_view(a: st.Attempt, s: RunState) -> v.AttemptView:
    gate = s.gates.get(a.gate_id) if a.gate_id is not None else None
    vetoed = ""
    if a.status == st.AttemptStatus.VETOED and gate is not None:
        vetoed = f"gate {gate.gate_id} by {gate.by or 'user'}" + (
            f": {gate.note}" if gate.note else ""
        )
    return v.AttemptView(a, stage=attempt_stage(a, s), vetoed=vetoed)


# the verifier's progress gates, as the stage a person reads
_STAGES = {
    "load": "compile", "compile": "compile", "correctness": "correct", "fence": "correct",
    "anti-cheat": "correct", "determinism": "correct", "speed": "time", "profile": "profile",
    "baselines": "baselines",  # a worker's first: torch.compile's baselines compiled
    "references": "compile",  # before the load: the reference fingerprinted per trial
}  # fmt: skip


def attempt_stage(a: st.Attempt, s: RunState) -> str:
    """The stage a running attempt is in (from its latest progress line), or "profile"
    while a judged one is being profiled (not once the run has ended: a forced stop
    cancels a profile in flight, which then never reports); "" otherwise."""
    gate = s.progress[a.number][1] if a.number in s.progress else ""
    if gate == "profile":
        return "" if a.number in s.profiles or s.finished else "profile"
    if a.status != st.AttemptStatus.RUNNING:
        return ""
    return _STAGES.get(gate, "")


# --- attempt logs ---------------------------------------------------------------------


def log_line(event: ev.Event, started_ts: float | None) -> tuple[int, str] | None:
    """(attempt, line) for events that belong in an attempt's live log."""
    t = _stamp(event, started_ts)
    if isinstance(event, ev.ProposalReceived):
        tokens = event.tokens_in + event.tokens_out
        cost = (f", {tokens:,} tokens" if tokens else "") + (
            f", ${event.cost_usd:.4f}" if event.cost_usd else ""
        )
        return event.attempt, (
            f"{t}proposed by {event.proposer}{'/' + event.model if event.model else ''}: "
            f"{event.move} (undo {event.undo_cost}: {event.undo_reason}{cost})"
        )
    if isinstance(event, ev.GateRaised):
        return event.attempt, f"{t}gate {event.gate_id} raised: waiting ({event.policy})"
    if isinstance(event, ev.AttemptStarted):
        retry = f" (retry {event.retry})" if event.retry else ""
        slot = f" ({event.slot})" if event.slot else ""
        return event.attempt, f"{t}started on {event.runner}{slot}{retry}"
    if isinstance(event, ev.AttemptProgress):
        gate = f"[{event.gate}] " if event.gate else ""
        return event.attempt, f"{t}{gate}{event.message}"
    if isinstance(event, ev.AttemptRetried):
        return event.attempt, f"{t}retried: {event.reason}"
    if isinstance(event, ev.VerdictReady):
        where = f" at {event.gate}" if event.gate else ""
        summary = fmt.standing_summary(event) if event.verdict == "pass" else event.summary
        return event.attempt, f"{t}verdict {event.verdict_kind}{where}: {summary}"
    if isinstance(event, ev.BestConfirmed):
        figure = f"vs best {event.vs_best:.3f}x, " if event.vs_best is not None else ""
        held = "confirmed" if event.held else f"did not hold: {event.detail}"
        return event.attempt, (
            f"{t}re-measured at the run's end: {figure}up to {event.rounds} rounds back to back "
            f"per shape; {held}"
        )
    cancelled = getattr(ev, "AttemptCancelled", None)
    if cancelled is not None and isinstance(event, cancelled):
        return event.attempt, f"{t}cancelled: {event.reason}"
    return None


def _stamp(event: ev.Event, started_ts: float | None) -> str:
    """Seconds since the run started: from the log, so a replay shows the same."""
    return f"{event.ts - started_ts:7.1f}s  " if started_ts is not None else ""


class AttemptLogs:
    """Each attempt's log lines with the seq of the event that wrote them.

    Kept as two flat lists per attempt (ints and strings), not one object per line: a
    busy run writes tens of thousands of lines, and objects the garbage collector must
    track make its full passes long enough to be felt as a stutter.
    """

    def __init__(self) -> None:
        self._seqs: dict[int, list[int]] = {}
        self._texts: dict[int, list[str]] = {}
        self._gate_attempt: dict[str, int] = {}
        self.started_ts: float | None = None

    def _append(self, attempt: int, seq: int, text: str) -> None:
        seqs = self._seqs.get(attempt)
        if seqs is None:
            seqs = self._seqs[attempt] = []
            self._texts[attempt] = []
        seqs.append(seq)
        self._texts[attempt].append(text)

    def add(self, event: ev.Event) -> int | None:
        """Record the event's line; returns the attempt it belongs to, if any."""
        if isinstance(event, ev.RunStarted):
            self.started_ts = event.ts
        if isinstance(event, ev.GateRaised):
            self._gate_attempt[event.gate_id] = event.attempt
        if isinstance(event, ev.GateResolved):
            attempt = self._gate_attempt.get(event.gate_id)
            if attempt is None:
                return None
            note = f" ({event.note})" if event.note else ""
            line = f"{_stamp(event, self.started_ts)}gate {event.gate_id}: {event.decision} by {event.by}{note}"
            self._append(attempt, event.seq, line)
            return attempt
        found = log_line(event, self.started_ts)
        if found is None:
            return None
        attempt, line = found
        self._append(attempt, event.seq, line)
        return attempt

    def lines(self, attempt: int, before_seq: int | None = None, start: int = 0) -> list[str]:
        """The attempt's lines from index `start`, only those written by events with
        seq < before_seq."""
        texts = self._texts.get(attempt)
        if not texts:
            return []
        end = len(texts)
        if before_seq is not None:
            end = bisect.bisect_left(self._seqs[attempt], before_seq)
        return texts[start:end]

    def count(self, attempt: int) -> int:
        return len(self._texts.get(attempt, ()))


# --- live fold ------------------------------------------------------------------------


class RunFold:
    """The state of a live run, folded batch by batch."""

    def __init__(self) -> None:
        self.state: RunState = new_state()
        self.logs = AttemptLogs()
        self.folded = 0
        self._view: RunView = EMPTY_VIEW
        self._view_at = -1

    def apply_all(self, events: Iterable[ev.Event]) -> set[int]:
        """Folds the events; returns the attempts whose logs grew."""
        touched: set[int] = set()
        state = self.state
        for event in events:
            apply(state, event)
            attempt = self.logs.add(event)
            if attempt is not None:
                touched.add(attempt)
            self.folded += 1
        return touched

    def view(self) -> RunView:
        if self._view_at != self.folded:
            self._view = build_view(self.state)
            self._view_at = self.folded
        return self._view


# --- replay ---------------------------------------------------------------------------


class ReplayTimeline:
    """A saved run's events, with the state at any position (0..len)."""

    def __init__(self, events: Sequence[ev.Event]) -> None:
        self.events = list(events)
        self.logs = AttemptLogs()
        for event in self.events:
            self.logs.add(event)
        self._cursor_pos = 0
        self._cursor_state = new_state()
        self._views: dict[int, RunView] = {}

    def __len__(self) -> int:
        return len(self.events)

    def state_at(self, position: int) -> RunState:
        """The fold of events[:position]. Valid until the next call."""
        position = max(0, min(position, len(self.events)))
        if position < self._cursor_pos:
            self._cursor_pos, self._cursor_state = 0, new_state()
        state, events = self._cursor_state, self.events
        for i in range(self._cursor_pos, position):
            apply(state, events[i])
        self._cursor_pos = position
        return state

    def view_at(self, position: int) -> RunView:
        position = max(0, min(position, len(self.events)))
        view = self._views.get(position)
        if view is None:
            view = build_view(self.state_at(position))
            if len(self._views) > 64:
                self._views.clear()
            self._views[position] = view
        return view

    def seq_at(self, position: int) -> int | None:
        """The seq of the first event not yet shown at this position (None: all shown)."""
        if position >= len(self.events):
            return None
        return self.events[position].seq
