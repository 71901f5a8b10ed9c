"""The run's state as data: attempts, gates, branches, notices and the run, with the
status words a person is shown. Built and changed only by the fold (state.py), which
re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class BranchStatus(StrEnum):
    """A branch's status, as shown to a person (str-valued: logs and JSON keep the word)."""

    RUNNING = "running"
    PAUSED = "paused"
    WAITING_GATE = "waiting-gate"
    EXHAUSTED = "exhausted"
    PRUNED = "pruned"
    STOPPED = "stopped"


class AttemptStatus(StrEnum):
    """An attempt's status: the one set of words the fold, the views, the search and the
    tuner read (str-valued: logs and JSON keep the word)."""

    PROPOSED = "proposed"  # numbered, source saved, not started
    GATED = "gated"  # waiting at an undo-cost gate
    VETOED = "vetoed"  # the gate said no: never verified
    RUNNING = "running"  # being verified
    JUDGED = "judged"  # has a verdict
    CANCELLED = "cancelled"  # started, stopped without a verdict (re-run on resume)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt as the fold knows it: frozen, replaced (never changed) by each event
    that concerns it, so a view, the search or the tuner may hold it as it is."""

    number: int
    branch_id: str
    parent: int | None
    strategy: str
    move: str
    undo_cost: str
    undo_reason: str
    source_hash: str
    proposer: str
    model: str | None = None
    family: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the proposal's meta (search params)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    status: AttemptStatus = AttemptStatus.PROPOSED
    gate_id: str | None = None  # the undo-cost gate it waited at, if any
    approved: bool = False  # went through a gate with "approve"
    verdict: str | None = None  # "pass" | "fail"
    verdict_kind: str | None = None  # "pass" | "fail" | "crash" | "timeout"
    failed_gate: str | None = None
    speedup: float | None = None
    floor_fraction: float | None = None
    noise: float | None = None
    summary: str = ""
    standing: str = ""  # VerdictReady.standing
    vs_best: float | None = None  # VerdictReady.vs_best
    standing_shapes: dict[str, Any] = field(default_factory=dict)  # VerdictReady.standing_shapes
    early_stop: int | None = None  # VerdictReady.early_stop: not faster than this attempt
    verdict_hash: str = ""
    elapsed_s: float = 0.0
    retries: int = 0
    runner: str = ""
    slot: str = ""  # where it ran ("cuda:1", "host:gpu"); "" in older logs
    received_ts: float = 0.0
    started_ts: float | None = None
    judged_ts: float | None = None

    def evolve(self, **changes: Any) -> Attempt:
        """A copy with `changes` (dataclasses.replace without its per-call introspection:
        the fold replaces a record per event, so this is its hot path)."""
        new = object.__new__(Attempt)
        for name in _ATTEMPT_SLOTS:
            object.__setattr__(new, name, changes[name] if name in changes else getattr(self, name))
        return new

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def needs_verify(self) -> bool:
        """Numbered and allowed to run, but without a verdict (resume re-runs these)."""
        return self.status in (
            AttemptStatus.PROPOSED,
            AttemptStatus.RUNNING,
            AttemptStatus.CANCELLED,
        )


_ATTEMPT_SLOTS = Attempt.__slots__


@dataclass(slots=True)
class GateState:
    gate_id: str
    branch_id: str
    attempt: int
    move: str
    undo_cost: str
    reason: str
    policy: str
    timeout_s: float | None
    raised_ts: float
    decision: str | None = None  # "approve" | "veto" once resolved
    by: str | None = None
    note: str = ""
    # when the person was last asked: the raise, or the resume that asked again (the
    # time a killed or stopped run was down never counts against the person)
    asked_ts: float = 0.0

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def deadline(self) -> float | None:
        return None if self.timeout_s is None else self.asked_ts + self.timeout_s


@dataclass(slots=True)
class BranchState:
    id: str
    strategy: str
    from_attempt: int | None
    opened_by: str = "engine"
    opened_ts: float = 0.0
    attempts: list[int] = field(default_factory=list)
    best_attempt: int | None = None
    best_speedup: float | None = None
    best_noise: float | None = None
    baseline_speedup: float | None = None  # speedup of the attempt it was opened from
    baseline_noise: float | None = None
    hints: str = ""
    dead_ends: list[str] = field(default_factory=list)
    # vetoed moves bind the branch at the level they were proposed: a family change
    # vetoes the family, a step within a family vetoes that step (its move line)
    vetoed_families: list[str] = field(default_factory=list)
    vetoed_moves: list[str] = field(default_factory=list)
    failure_counts: dict[str, int] = field(default_factory=dict)
    stagnation: int = 0  # judged attempts since the last gain
    passes: int = 0
    fails: int = 0
    closed_as: BranchStatus | None = None  # EXHAUSTED | PRUNED, once it will never run again
    rule: str | None = None  # the exit rule, when exhausted
    detail: str = ""
    paused: bool = False
    stopped: bool = False  # the run finished while this branch could still run
    requesting: bool = False  # a proposal was asked for and not yet received
    pending_gate: str | None = None
    running: int | None = None  # the attempt being verified
    proposal_failures: int = 0  # consecutive failed proposals
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    # its line (engine/run/branch_line.py): the family it works in, the attempt a person's
    # approval began it at (None: where the branch began), that line's best, and each
    # family it left with the attempt that left it
    line_family: str | None = None
    line_start: int | None = None
    line_best: int | None = None
    families_left: dict[str, int] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return self.closed_as is not None

    @property
    def status(self) -> BranchStatus:
        if self.closed_as is not None:
            return self.closed_as
        if self.stopped:
            return BranchStatus.STOPPED
        if self.pending_gate is not None:
            return BranchStatus.WAITING_GATE
        if self.paused:
            return BranchStatus.PAUSED
        return BranchStatus.RUNNING

    @property
    def head(self) -> int | None:
        """The attempt its next proposal starts from: the best of the line a person
        approved (else the approved attempt itself); without one, its best, else where it
        began."""
        if self.line_start is not None:
            return self.line_best if self.line_best is not None else self.line_start
        return self.best_attempt if self.best_attempt is not None else self.from_attempt


@dataclass(slots=True)
class NoticeState:
    seq: int
    ts: float
    level: str
    message: str
    branch_id: str | None


@dataclass(slots=True)
class RunState:
    run_id: str = ""
    op: str = ""
    op_kind: str = "builtin"
    proposer: str = ""
    model: str | None = None
    device: str = ""
    gpu: str | None = None
    runner: str = ""
    speed_measured: bool = False
    sandbox: str | None = None  # the workers' walls, as the runner's first worker said
    settings: dict[str, Any] = field(default_factory=dict)
    target: float | None = None
    started_ts: float | None = None
    last_ts: float = 0.0
    seq: int = -1  # last folded event
    events: int = 0
    segments_s: float = 0.0  # active time of earlier sessions (before a resume)
    segment_start: float | None = None
    reopened: int = 0  # times resumed
    paused: bool = False
    stopping: bool = False
    stop_reason: str | None = None
    finished: bool = False
    finish_reason: str | None = None
    finish_detail: str = ""
    hints: str = ""  # global hints
    branches: dict[str, BranchState] = field(default_factory=dict)
    attempts: dict[int, Attempt] = field(default_factory=dict)
    # each attempt's latest progress line (message, gate) and how many it wrote: kept
    # beside the frozen records, as a busy run writes many more of these than anything else
    progress: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    # the strategy graph (engine/graph.py), built on the first lineage question asked of
    # this many attempts and branches (networkx is not imported until then)
    lineage_cache: tuple[int, int, Any] | None = field(default=None, compare=False, repr=False)
    gates: dict[str, GateState] = field(default_factory=dict)
    pending_gates: dict[str, None] = field(default_factory=dict)  # ordered set of ids
    notices: list[NoticeState] = field(default_factory=list)
    best_attempt: int | None = None  # the best that held, once the end's re-measure says
    best_speedup: float | None = None
    ranked_best: int | None = None  # the best by rank (BestImproved), held or not
    # BestConfirmed events in order: attempt -> the event's fields (the last one counts)
    confirmations: dict[int, dict[str, Any]] = field(default_factory=dict)
    passed_sources: set[str] = field(default_factory=set)
    attempts_used: int = 0  # attempt numbers handed out
    judged: int = 0
    passed: int = 0
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    proposal_failures: int = 0
    retries: int = 0
    # Nsight Compute profiles: attempt -> ProfileReady (status, reason, summary, report)
    profiles: dict[int, dict[str, Any]] = field(default_factory=dict)
    # kernels put into a model (DeployChecked), in the order recorded
    deploys: list[dict[str, Any]] = field(default_factory=list)

    def setting(self, name: str, default: Any = None) -> Any:
        value = self.settings.get(name, default)
        return default if value is None else value

    @property
    def next_attempt(self) -> int:
        return (max(self.attempts) + 1) if self.attempts else 1

    @property
    def elapsed_s(self) -> float:
        """Active run time according to the log (time between a kill and the resume
        does not count)."""
        return self.elapsed_at(None)

    def elapsed_at(self, now: float | None) -> float:
        if self.segment_start is None:
            return self.segments_s
        end = self.last_ts if now is None else max(now, self.last_ts)
        return self.segments_s + max(0.0, end - self.segment_start)

    @property
    def next_branch_id(self) -> str:
        return f"b{len(self.branches) + 1}"

    @property
    def next_gate_id(self) -> str:
        return f"g{len(self.gates) + 1}"

    def branch_of(self, attempt: int) -> BranchState | None:
        a = self.attempts.get(attempt)
        return None if a is None else self.branches.get(a.branch_id)

    def subtree_branches(self, branch_id: str) -> list[str]:
        """This branch and every branch opened (transitively) from its attempts."""
        from kernelladder.engine.record import graph as lineage_graph

        return lineage_graph.subtree_branches(lineage_graph.of(self), branch_id)

    def hints_for(self, branch_id: str) -> str:
        branch = self.branches.get(branch_id)
        parts = [self.hints.strip(), branch.hints.strip() if branch else ""]
        return "\n\n".join(p for p in parts if p)

    def branch_label(self, branch_id: str) -> str:
        """The branch's label, following the family of its current best: "persistent (was
        one-row-per-program)" once its best is of another family than it was opened with;
        and " · now F" while its latest attempt is of a family F other than that (a branch
        whose best is one family and that is walking another says both)."""
        b = self.branches[branch_id]
        best = self.attempts.get(b.best_attempt) if b.best_attempt is not None else None
        family = best.family if best is not None else None
        opened = b.strategy.split("#", 1)[0]
        label = b.strategy if not family or family == opened else f"{family} (was {b.strategy})"
        latest = next(
            (self.attempts[n].family for n in reversed(b.attempts)
             if n in self.attempts and self.attempts[n].family),
            None,
        )  # fmt: skip
        if latest and latest != (family or opened):
            label += f" · now {latest}"
        return label

    def history(self, branch_id: str) -> list[dict[str, Any]]:
        out = []
        for n in self.branches[branch_id].attempts:
            a = self.attempts[n]
            out.append(
                {
                    "attempt": n,
                    "parent": a.parent,
                    "move": a.move,
                    "status": a.status,
                    "verdict": a.verdict,
                    "gate": a.failed_gate,
                    "speedup": a.speedup,
                    "vs_best": a.vs_best,
                    "standing": a.standing,
                    "summary": a.summary,
                    "strategy": a.strategy,
                    "undo_cost": a.undo_cost,
                    "meta": a.meta,
                }
            )
        return out


def new_state() -> RunState:
    return RunState()
