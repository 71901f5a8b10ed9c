"""Every fact of a run is one of these frozen events.

The engine appends each to RUN_DIR/events.jsonl (flushed and fsync'd) before publishing
it. Run state is a fold over them (engine/record/state.py); the TUI and the headless view only
ever see events. Adding a field: give it a default so older logs still load; changing a
meaning: bump SCHEMA_VERSION and upcast the old one (engine/record/upcast.py, the one place).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, dataclass_transform

SCHEMA_VERSION = 2  # older events are upcast as they are read (engine/record/upcast.py)

# Undo-cost classes of a proposed move.
UNDO_LOW, UNDO_MEDIUM, UNDO_HIGH = "low", "medium", "high"

# Exit rules (BranchExhausted.rule / RunFinished.reason).
RULE_TARGET = "target-reached"
RULE_MAX_ATTEMPTS = "max-attempts"
RULE_STAGNATION = "stagnation"
RULE_REPEATED_FAILURE = "repeated-failure"
RULE_BUDGET_ATTEMPTS = "budget-attempts"
RULE_BUDGET_TIME = "budget-time"
RULE_BUDGET_USD = "budget-usd"
RULE_BUDGET_TOKENS = "budget-tokens"
RULE_USER_STOP = "user-stop"
RULE_PROPOSER_EXHAUSTED = "proposer-exhausted"  # the search has no untried move left
RULE_ALL_BRANCHES_DONE = "all-branches-done"
RULE_ERROR = "error"


EVENT_TYPES: dict[str, type[Event]] = {}  # kind -> event class, filled as each is defined


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
@dataclass(frozen=True, kw_only=True)
class Event:
    """A subclass is made a frozen, keyword-only dataclass and registered under its `kind`:
    its name in snake case (RunStarted: "run_started") unless the class names its own."""

    kind: ClassVar[str] = "event"
    # recorded beside the run, not part of its course (a deploy after the end): the run's
    # elapsed time and "did the log reach RunFinished" leave it out
    beside_the_run: ClassVar[bool] = False
    seq: int = -1  # assigned by the log when appended; 0-based, gap-free
    ts: float = 0.0  # unix time, assigned by the log when appended
    schema_version: int = SCHEMA_VERSION

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            cls.kind = _CAPITAL.sub(r"_\g<0>", cls.__name__).lower()
        dataclass(frozen=True, kw_only=True)(cls)
        EVENT_TYPES[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind}
        for f in dataclasses.fields(self):
            d[f.name] = _jsonable(getattr(self, f.name))
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False)


_CAPITAL = re.compile(r"(?<!^)[A-Z]")


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def event_from_dict(d: dict[str, Any]) -> Event:
    """Rebuild an event from its JSON form; unknown fields are ignored (newer writers)."""
    cls = EVENT_TYPES.get(d.get("kind", ""))
    if cls is None:
        raise ValueError(f"unknown event kind {d.get('kind')!r}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in d.items():
        if k in names:
            if isinstance(v, list) and _is_tuple_field(names[k]):
                v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
            kwargs[k] = v
    return cls(**kwargs)


def _is_tuple_field(f: dataclasses.Field) -> bool:
    return "tuple" in str(f.type)


# --- run ---------------------------------------------------------------------------


class RunStarted(Event):
    run_id: str
    op: str  # op name or the problem file's name
    op_kind: str = "builtin"  # "builtin" | "kernelbench"
    proposer: str = "search"
    model: str | None = None
    device: str = "cpu"  # "cuda" | "cpu"
    gpu: str | None = None  # GPU name, when known
    runner: str = "local"  # "local" | "ssh:user@host" | "pool"
    target: float | None = None  # target speedup
    settings: dict[str, Any] = field(default_factory=dict)  # the optimize options, as given
    speed_measured: bool = False  # False on the CPU: no speed numbers exist
    sandbox: str | None = None  # the workers' walls: "on (Landlock ABI 7: ...)" or "off (why)"


class RunReopened(Event):
    """`optimize --resume` picked the run up again after a stop or a kill."""

    repaired_tail: bool = False  # a torn last line was dropped
    requeued_attempts: tuple[int, ...] = ()  # attempts started but never judged, re-run
    settings: dict[str, Any] = field(default_factory=dict)  # options changed on resume


class RunPaused(Event):
    by: str = "user"


class RunResumed(Event):
    by: str = "user"


class TargetChanged(Event):
    target: float | None
    by: str = "user"


class Notice(Event):
    """Something a person should see: a runner lost, a proposer failing, no API key."""

    level: str = "info"  # "info" | "warning" | "error"
    message: str = ""
    branch_id: str | None = None


class StopRequested(Event):
    """A stop was asked for; in-flight attempts finish (or, cancel=True, are cancelled)
    and RunFinished follows."""

    reason: str = RULE_USER_STOP  # RULE_*
    cancel: bool = False  # in-flight verifications are cancelled, not awaited
    by: str = "user"  # "user" | "engine"


class RunFinished(Event):
    reason: str  # one of the RULE_* names
    detail: str = ""
    best_attempt: int | None = None
    best_speedup: float | None = None
    best_vs_best: float | None = None  # None in older logs and without speed


# --- branches ------------------------------------------------------------------------


class BranchOpened(Event):
    branch_id: str  # "b1", "b2", ...
    strategy: str  # label, e.g. "rows-per-program" or "online-softmax"
    from_attempt: int | None = None  # None: from the op's starting candidate
    by: str = "engine"  # "engine" | "user"


class BranchPruned(Event):
    branch_id: str
    pruned: tuple[str, ...] = ()  # this branch and every branch opened from its subtree
    by: str = "user"


class BranchExhausted(Event):
    branch_id: str
    rule: str  # RULE_*
    detail: str = ""


class BranchPaused(Event):
    branch_id: str
    by: str = "user"


class BranchResumed(Event):
    branch_id: str
    by: str = "user"


class HintEdited(Event):
    text: str
    branch_id: str | None = None  # None: global hints
    by: str = "user"


# --- proposals and attempts ---------------------------------------------------------------


class ProposalRequested(Event):
    branch_id: str
    parent_attempt: int | None = None


class ProposalReceived(Event):
    branch_id: str
    attempt: int  # the attempt number this proposal becomes (1-based, never reused)
    parent_attempt: int | None
    source_hash: str  # sha256 of attempts/<attempt>.py
    strategy: str
    move: str  # one line: what changed against the parent
    undo_cost: str  # UNDO_*
    undo_reason: str
    proposer: str
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    family: str | None = None  # algorithm family (Proposal.meta["family"]), when known
    meta: dict[str, Any] = field(default_factory=dict)  # Proposal.meta (e.g. search parameters)


class ProposalFailed(Event):
    branch_id: str
    error: str  # one line
    retryable: bool = False
    # what a reply that was paid for and then rejected cost (no code block, no text):
    # counted against the budgets as a proposal's are
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(
        cls, branch_id: str, error: str, spent: Any = None, *, retryable: bool = False
    ) -> ProposalFailed:
        """The event, with what `spent` (a ProposerError or a dropped Proposal) cost."""
        return cls(
            branch_id=branch_id,
            error=error,
            retryable=retryable,
            model=getattr(spent, "model", None),
            tokens_in=int(getattr(spent, "tokens_in", 0) or 0),
            tokens_out=int(getattr(spent, "tokens_out", 0) or 0),
            cost_usd=float(getattr(spent, "cost_usd", 0.0) or 0.0),
        )


class GateRaised(Event):
    """A high-undo-cost move waits for a decision before it is verified."""

    gate_id: str  # "g1", ...
    branch_id: str
    attempt: int
    move: str
    undo_cost: str
    reason: str
    policy: str  # "ask" | "approve" | "veto"
    timeout_s: float | None = None  # the policy applies itself after this


class GateResolved(Event):
    gate_id: str
    decision: str  # "approve" | "veto"
    by: str = "user"  # "user" | "policy" | "timeout" | "hints" | "stop"
    note: str = ""


class AttemptStarted(Event):
    attempt: int
    branch_id: str
    runner: str = "local"  # the runner's name, e.g. "local", "ssh:user@box", "pool:2"
    retry: int = 0  # >0 when re-run after a lost connection
    slot: str = ""  # where it ran: "cuda:1", "cpu:0", "gpu-box:1"; "" in older logs


class AttemptProgress(Event):
    """A line of the attempt's live log (worker progress, the candidate's stderr)."""

    attempt: int
    gate: str = ""
    message: str = ""


class AttemptRetried(Event):
    attempt: int
    reason: str  # e.g. "connection to gpu-box lost"


class AttemptCancelled(Event):
    """An attempt started but stopped without a verdict (a forced stop); a resumed run
    re-runs it under the same number."""

    attempt: int
    branch_id: str
    reason: str = ""


class VerdictReady(Event):
    attempt: int
    branch_id: str
    verdict: str  # "pass" | "fail"
    verdict_kind: str  # "pass" | "fail" | "crash" | "timeout"
    gate: str | None  # first failing gate
    speedup: float | None = None
    floor_fraction: float | None = None
    noise: float | None = None
    summary: str = ""  # one line: the failing gate's detail, or the speed
    verdict_hash: str = ""  # sha256 of attempts/<attempt>.json
    elapsed_s: float = 0.0
    # against the fastest library baseline per shape, in a few words ("3 faster, 2 tie",
    # "beats every baseline"); "" when speed was not measured (and in older logs)
    standing: str = ""
    # geomean over the shapes of the fastest baseline's time over the candidate's, and per
    # shape {"baseline", "vs_best", "standing", "rounds", "won", "lost"}; None / {} when
    # speed was not measured (and in older logs, which then rank by the reference speedup)
    vs_best: float | None = None
    standing_shapes: dict[str, Any] = field(default_factory=dict)
    # the attempt this one was "not faster than" when its timing stopped early (coarse
    # times; never a best); None: timed in full (and in older logs)
    early_stop: int | None = None


class BestImproved(Event):
    attempt: int
    branch_id: str
    speedup: float | None  # None on the CPU: "best" is then the first passing attempt
    previous: float | None = None
    overall: bool = False  # also the best of the whole run
    vs_best: float | None = None  # the attempt's vs best (None in older logs and on the CPU)


class BestConfirmed(Event):
    """At the end of a run a best attempt re-measured in a fresh worker, back to back
    with the fastest baseline at every shape for more rounds than the speed gate's."""

    attempt: int
    held: bool  # still slower nowhere if it was, and vs best inside the noise band
    vs_best: float | None = None  # re-measured
    recorded_vs_best: float | None = None  # as its verdict had it
    shapes: dict[str, Any] = field(default_factory=dict)  # label -> row as standing_shapes
    noise: float | None = None  # the band: the re-measure's noise (at least 1%)
    rounds: int = 0  # back-to-back rounds per shape, at most (a settled tie stops sooner)
    detail: str = ""  # one line; why it did not hold, or why it could not be re-measured


class ProfileReady(Event):
    """An Nsight Compute profile of one attempt on the op's largest shape (the start,
    each new best, a stalled branch's best), or why none could be taken."""

    attempt: int
    branch_id: str | None = None
    status: str = "ok"  # "ok" | "unavailable" | "failed"
    reason: str = ""  # why: "new best", "start", "branch stalled"; or what went wrong
    summary: dict[str, Any] = field(default_factory=dict)  # verifier.profile.ProfileSummary
    report: str = ""  # the .ncu-rep, relative to the run directory
    gpu_s: float | None = None  # the GPU held to itself while ncu replayed the call
    wall_s: float | None = None  # the whole profile, ncu's start to its summary
    shared_s: float | None = None  # the GPU held beside correctness runs (the warm-up)


# --- after the search ---------------------------------------------------------------------


class DeployChecked(Event):
    """A kernel of the run put into a real model (`kernelladder deploy`, the app's Deploy
    key): checked against the model without it and, on a GPU, timed. `result` is the
    deploy's whole result (kernelladder/deploy/result.py; its own schema_version)."""

    beside_the_run: ClassVar[bool] = True
    attempt: int | None = None  # None: a kernel from a file
    op: str = ""
    model: str = ""  # the model config's name, e.g. "llama-3-8b"
    status: str = ""  # "match" | "mismatch" | "not-used" | "error"
    summary: str = ""  # one line
    result: dict[str, Any] = field(default_factory=dict)
