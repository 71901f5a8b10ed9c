"""What the screen shows, as frozen data: a view of the folded run state.

Widgets read only these; `build_view` (app/folding.py) is the one place that knows the
shape of the engine's state. An attempt is the engine's own frozen record, not a copy.
Nothing here imports textual, so it is tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import Any

from kernelladder.engine import Attempt, AttemptStatus, BranchStatus, RunState
from kernelladder.engine import events as ev

# Attempt and branch states are the engine's own enums (engine/state_model.py); the run's
# state below is the screen's word for the run as a whole.
RUN_RUNNING = "running"
RUN_PAUSED = "paused"
RUN_STOPPING = "stopping"
RUN_FINISHED = "finished"
RUN_NOT_STARTED = "not started"
RUN_RESUMING = "resuming"  # a resumed run before its session's first event
RUN_LOG_ENDS = "log ends"  # a replay at the end of a log that never finished

# The engine's fields a view shows as the engine keeps them (build_view copies them).
# RunView and GateView take these fields' declarations from the engine's classes.
RUN_AS_FOLDED = (
    "run_id",
    "op",
    "op_kind",
    "proposer",
    "model",
    "device",
    "gpu",
    "runner",
    "target",
    "speed_measured",
    "sandbox",  # "off (why)" shows in the header; None in older logs
    "started_ts",
    "segments_s",  # active time of sessions before a resume
    "segment_start",  # when the current session started
    "events",  # how many events were folded
    "attempts_used",  # attempt numbers handed out
    "cost_usd",
    "tokens_in",
    "tokens_out",
    "best_attempt",
    "best_speedup",
    "hints",  # global hints
)
GATE_AS_RAISED = (
    "gate_id",
    "branch_id",
    "attempt",
    "move",
    "undo_cost",
    "reason",
    "policy",
    "timeout_s",
)
BRANCH_AS_FOLDED = ("detail", "from_attempt", "opened_by", "best_attempt", "best_speedup", "hints")


def _declared_by(record: type, names: tuple[str, ...]) -> type:
    """A frozen base class of the record's fields `names`, each with the type and the
    default the record declares."""
    declared = {f.name: f for f in fields(record)}
    chosen = [declared[n] for n in names]
    shown = [
        (f.name, f.type, field(default=f.default, default_factory=f.default_factory))
        for f in chosen
    ]
    return make_dataclass(f"{record.__name__}Fields", shown, frozen=True)


@dataclass(frozen=True, slots=True)
class AttemptView:
    """An attempt as the screen shows it: the fold's own frozen record, read through, and
    what only the screen needs beside it."""

    record: Attempt
    # where it is now: "baselines" | "compile" | "correct" | "time" | "profile" | ""
    stage: str = ""
    vetoed: str = ""  # a vetoed move: which gate, by whom, with the note

    def __getattr__(self, name: str) -> Any:
        if name == "record":  # not set yet (a copy being made): no record to read through
            raise AttributeError(name)
        return getattr(self.record, name)

    @property
    def state(self) -> AttemptStatus:
        return self.record.status

    @property
    def gate(self) -> str | None:
        """The first failing gate."""
        return self.record.failed_gate

    @property
    def strategy(self) -> str:
        """What the attempt is: its family, else its branch's strategy."""
        return self.record.family or self.record.strategy


@dataclass(frozen=True)
class BranchView:
    branch_id: str
    strategy: str
    state: BranchStatus = BranchStatus.RUNNING
    rule: str = ""  # the exit rule that ended it
    detail: str = ""
    from_attempt: int | None = None
    opened_by: str = "engine"
    attempts: tuple[int, ...] = ()
    best_attempt: int | None = None
    best_speedup: float | None = None
    hints: str = ""
    paused: bool = False  # paused by the person (a branch waiting at a gate may be too)
    run_paused: bool = False  # the whole run is paused: a running branch waits with it
    is_best: bool = False  # holds the run's best attempt

    @property
    def waits_with_run(self) -> bool:
        """A running branch of a paused run: nothing of it runs until the run resumes."""
        return self.run_paused and self.state == BranchStatus.RUNNING


@dataclass(frozen=True)
class GateView(_declared_by(ev.GateRaised, GATE_AS_RAISED)):  # type: ignore[misc]
    """A pending gate: what it was raised with, and since when it waits."""

    raised_ts: float = 0.0  # the countdown's start: the raise, or the resume that asked again


@dataclass(frozen=True)
class RunView(_declared_by(RunState, RUN_AS_FOLDED)):  # type: ignore[misc]
    """The run as the screen shows it: RUN_AS_FOLDED as the fold keeps them, and below,
    what the screen reads in its own words."""

    settings: dict[str, Any] = field(default_factory=dict)
    state: str = RUN_NOT_STARTED
    finish_reason: str = ""
    finish_detail: str = ""
    last_ts: float | None = None
    attempts_judged: int = 0
    best_floor_fraction: float | None = None
    best_branch: str | None = None
    # the best by standing (logs that record vs best): "1.03x vs torch.compile", "3 faster
    # 2 tie", and the end's re-measure ("confirmed" | "did not hold" | "")
    best_vs_best: float | None = None
    best_versus: str | None = None
    best_standing: str = ""
    best_confirmed: str = ""
    branches: tuple[BranchView, ...] = ()
    attempts: dict[int, AttemptView] = field(default_factory=dict)
    gates: tuple[GateView, ...] = ()  # pending, oldest first
    profiles: dict[int, dict[str, Any]] = field(default_factory=dict)  # attempt -> profile
    # attempt -> its deploys into models (DeployChecked: seq, model, status, summary, result)
    deploys: dict[int, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def branch(self, branch_id: str | None) -> BranchView | None:
        for b in self.branches:
            if b.branch_id == branch_id:
                return b
        return None

    def gate(self, gate_id: str | None) -> GateView | None:
        for g in self.gates:
            if g.gate_id == gate_id:
                return g
        return None

    @property
    def live(self) -> bool:
        return self.state in (RUN_RUNNING, RUN_PAUSED, RUN_STOPPING)

    def elapsed(self, now: float | None = None) -> float | None:
        """Active run time: up to `now` while live, up to the last event otherwise."""
        if self.segment_start is None:
            return None if self.started_ts is None else self.segments_s
        end = self.last_ts or self.segment_start
        if now is not None and self.state != RUN_FINISHED:
            end = max(end, now)
        return self.segments_s + max(0.0, end - self.segment_start)


def resuming_view(view: RunView) -> RunView:
    """A resumed run's earlier sessions, shown until this session reopens it: neither
    finished (the last session's end is over) nor running (no clock ticks yet)."""
    return replace(
        view,
        state=RUN_RESUMING,
        finish_reason="",
        finish_detail="",
        segments_s=view.elapsed() or 0.0,
        segment_start=None,
    )


def log_end_view(view: RunView, ending: str) -> RunView:
    """A replay at the end of a log that stops before the run finished: nothing runs any
    more, so not "running" but why the log ends there (`finish_detail`)."""
    if view.state == RUN_FINISHED or not ending:
        return view
    return replace(view, state=RUN_LOG_ENDS, finish_reason="", finish_detail=ending)


EMPTY_VIEW = RunView()
