"""The run: K branches as asyncio tasks, each asking its proposer for a move, gating
risky moves, verifying through the runner and recording every fact as an event.

    run = create_run(RunOptions(op="rmsnorm", device="cpu"))
    sub = run.subscribe()          # the UI's event stream (bounded, never blocks us)
    state = await run.run()        # until a rule, a budget or a person ends it

Every state change goes through `_emit`: the event is appended to the log (fsync'd),
folded into `self.state` with the same fold replay uses, then offered to subscribers.
Steering commands (RunControl) validate against that state, emit their event and wake
whatever waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelladder.engine import events as ev
from kernelladder.engine.channels import Broadcaster, Subscription
from kernelladder.engine.control import ControlServer
from kernelladder.engine.gating import assess_undo
from kernelladder.engine.log import (
    ATTEMPTS_DIR,
    EventLog,
    LogError,
    read_attempt_source,
    read_attempt_verdict,
    read_log,
    read_meta,
    repair_tail,
    write_durable,
)
from kernelladder.engine.options import RunOptions
from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    Proposer,
    ProposerError,
    ProposerExhausted,
    Runner,
    RunnerLost,
    VerifyRequest,
)
from kernelladder.engine.rules import (
    all_branches_done,
    attempts_left,
    branch_exit,
    max_attempts_reached,
    run_exit,
)
from kernelladder.engine.standing_rank import (
    MIN_NOISE,
    best_baseline_name,
    merit_of,
    standing_shapes,
)
from kernelladder.engine.state import (
    CANCELLED,
    GATED,
    PROPOSED,
    RUNNING_ATTEMPT,
    RunState,
    apply,
    fold,
    improvement,
    new_state,
    ranked_passes,
)
from kernelladder.verifier.verdict import BEATS_EVERY_BASELINE, standing, standing_text, vs_best

MAX_RUNNER_RETRIES = 2  # a lost runner re-runs the attempt this many times, then the run stops
RETRY_BACKOFF_S = 1.0
PROPOSAL_FAILURE_LIMIT = 3  # failed proposals in a row before a branch gives up
PROGRESS_PER_GATE = 4  # progress events recorded per gate of an attempt; the rest are dropped
PROGRESS_INTERVAL_S = 0.5
GATE_POLICIES = ("ask", "approve", "veto")
CONFIRM_ROUNDS = 15  # back-to-back rounds per shape when the run's best is re-measured
CONFIRM_LIMIT = 3  # re-measures at the end of a run, at most (best, runner-up, next best)

# What a branch task is doing, for shutdown (verifications finish, the rest is cancelled).
IDLE, PROPOSING, GATE, QUEUED, VERIFYING, DONE = (
    "idle", "proposing", "gate", "queued", "verifying", "done",
)  # fmt: skip


START_ATTEMPT = 0  # the number of the user's own kernel, verified before any proposal


def one_line(text: object, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass(frozen=True)
class OpInfo:
    """What the engine needs of an op, saved in meta.json so a resume needs no problem
    file and no torch."""

    name: str
    kind: str  # "builtin" | "kernelbench"
    wire: Any  # VerifyRequest.op
    description: dict[str, Any]  # OpSpec.describe()
    starting_source: str  # the starting candidate ("" when the op has none)
    # set when the start is the user's own kernel (a workspace, or --start FILE): it is
    # verified first, as attempt #0, and every branch starts from it
    start_label: str = ""
    reference_note: str = ""  # e.g. "the reference is your original kernel (no reference.py)"

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "kind": self.kind,
            "wire": self.wire,
            "description": self.description,
            "starting_source": self.starting_source,
        }
        if self.start_label:
            d["start_label"] = self.start_label
        if self.reference_note:
            d["reference_note"] = self.reference_note
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpInfo:
        return cls(
            d["name"], d["kind"], d["wire"], dict(d["description"]), d["starting_source"],
            str(d.get("start_label") or ""), str(d.get("reference_note") or ""),
        )  # fmt: skip


def load_op_info(op: str, start: str | None = None) -> OpInfo:
    """Load a built-in op, a workspace directory or a KernelBench problem file; `start`:
    a file with the user's own starting kernel. OpLoadError (one line) if not."""
    from kernelladder.ops.registry import load_op, op_to_wire
    from kernelladder.ops.spec import OpLoadError

    spec = load_op(op)
    source, label = "", ""
    if spec.starting_candidate:
        source = Path(spec.starting_candidate).read_text(encoding="utf-8")
    if spec.kind == "workspace":
        source, label = spec.files.kernel, f"your kernel ({spec.name}/kernel.py)"  # type: ignore[attr-defined]
    if start:
        try:
            source = Path(start).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OpLoadError(f"--start {start}: cannot read it: {exc}") from None
        label = f"your kernel ({Path(start).name})"
    description = spec.describe()
    note = str(description.get("reference_note") or "")
    if spec.kind == "workspace":  # DIR/knowledge/ for the api/code prompts, within a budget
        from kernelladder.ops.workspace import knowledge_text

        text, files = knowledge_text(op)
        if files:
            description = {**description, "knowledge": text, "knowledge_files": files}
    return OpInfo(spec.name, spec.kind, op_to_wire(spec), description, source, label, note)


def new_run_id(op_name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", op_name).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def verdict_line(verdict: Any, versus: str | None = None) -> str:
    """One line: the failing gate's detail, or the speed (or why it was not measured).
    With a library baseline timed, vs best leads: "1.07x vs torch.compile (3 faster, 2
    tie), 103% of floor; 8.14x over reference"; else the speedup over the reference and
    the standing as before. `versus`: standing_text of its timings, when worked out."""
    if verdict.verdict != "pass":
        gate = verdict.gates.get(verdict.gate or "")
        return one_line(gate.detail if gate else verdict.kind)
    if verdict.speedup is not None:
        if versus is None:
            versus = standing_text(standing(verdict.timings))
        floor = (
            f", {verdict.floor_fraction:.0%} of floor" if verdict.floor_fraction is not None else ""
        )
        geomean = vs_best(verdict.timings)
        if geomean is not None:  # the figure of merit first, the reference second
            against = best_baseline_name(standing_shapes(verdict.timings)) or "best"
            words = f" ({versus})" if versus else ""
            return (
                f"{geomean:.3g}x vs {against}{words}{floor}; {verdict.speedup:.3g}x over reference"
            )
        line = f"{verdict.speedup:.3g}x{floor}"
        if versus and versus != BEATS_EVERY_BASELINE:
            versus = f"shapes vs baselines: {versus}"  # against the fastest, per shape
        return f"{line}; {versus}" if versus else line
    speed = verdict.gates.get("speed")
    return one_line("passed; " + (speed.detail if speed and speed.detail else "speed not measured"))


class Run:
    """One optimization run. Implements RunControl (protocols.py)."""

    retry_backoff_s = RETRY_BACKOFF_S  # tests shorten it

    def __init__(
        self,
        options: RunOptions,
        *,
        run_dir: str | Path,
        op: OpInfo,
        runner: Runner,
        proposer: Proposer,
        run_id: str | None = None,
        resumed: bool = False,
        repaired_tail: bool = False,
        overrides: dict[str, Any] | None = None,
        notices: Sequence[str] = (),
        gate_policy: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if options.gate not in GATE_POLICIES or gate_policy not in (None, *GATE_POLICIES):
            raise ValueError(f"gate policy must be one of {', '.join(GATE_POLICIES)}")
        if options.gate_timeout_policy not in ("approve", "veto"):
            raise ValueError("gate timeout policy must be approve or veto")
        self.options = options
        # the policy in force for this session only (never saved): options.gate, or an
        # unattended one when no one can answer an ask-gate (options.unattended_gate_policy)
        self.gate_policy: str = gate_policy or options.gate
        self.run_dir = Path(run_dir)
        self.op = op
        self.runner = runner
        self.proposer = proposer
        self._clock = clock
        self.log = EventLog(self.run_dir, clock=clock)
        self.state: RunState = fold(self.log.read_from(0)) if resumed else new_state()
        self.run_id = run_id or self.state.run_id or self.run_dir.name
        self._resumed = resumed and self.state.started_ts is not None
        # events below this seq were logged by earlier sessions (0 for a new run)
        self.session_start_seq: int = self.log.next_seq if resumed else 0
        self._repaired_tail = repaired_tail
        self._overrides = dict(overrides or {})
        self._startup_notices = list(notices)
        self._bus = Broadcaster(self.log.read_from, lambda: self.log.next_seq)
        self._waiters: list[asyncio.Future[None]] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._profiling = False  # Nsight Compute profiles (decided at start)
        self._profiled: set[int] = set()
        self._phase: dict[str, str] = {}
        self._proposal_tasks: dict[str, asyncio.Future[Proposal]] = {}
        self._work: dict[str, list[int]] = {}  # resumed attempts to finish first, per branch
        self._sources: dict[int, str] = {}
        self._verdicts: dict[int, dict[str, Any]] = {}
        self._reserved = 0  # proposals asked for and not yet numbered
        self._next_number = self.state.next_attempt
        self._slots: asyncio.Semaphore | None = None
        self._started = False
        self._run_called = False
        self._closed = False
        self._stop_detail = ""
        self._early_runner_error: Exception | None = None  # see runner_start_failed
        self._cancel_inflight = False
        self._run_cancelled = False  # run() itself was cancelled: end without re-measuring
        self._confirm_task: asyncio.Future[Any] | None = None
        self._finished = asyncio.Event()
        self.internal_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._control: ControlServer | None = None  # attached apps steer through it
        self._control_error = ""
        if not resumed:
            self.log.write_meta(
                {"run_id": self.run_id, "options": options.to_dict(), "op": op.to_dict()}
            )

    # --- public ---------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """RunStarted (or RunReopened) is logged: steering commands apply from now."""
        return self._started

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    @property
    def device(self) -> str:
        return self.state.device or self.options.device or "cpu"

    def runner_start_failed(self, error: Exception) -> None:
        """The runner was started before run() (the app does so to ask about an unknown
        SSH host key) and failed: run() records this error as its own runner start
        failure instead of connecting a second time."""
        if self._run_called:
            raise RuntimeError("the runner's start failure must be handed over before run()")
        self._early_runner_error = error

    def subscribe(self, maxsize: int = 10_000, from_seq: int = 0) -> Subscription:
        """Every event from `from_seq` (default: the whole log) in order, then live ones,
        until the run finishes. Never blocks the engine; never loses an event."""
        return self._bus.subscribe(maxsize=maxsize, from_seq=from_seq)

    async def wait_finished(self) -> RunState:
        await self._finished.wait()
        return self.state

    async def run(self) -> RunState:
        """Run until a rule, a budget or a stop ends it; returns the final state.
        The log is complete when this returns (RunFinished is its last event)."""
        if self._run_called:
            raise RuntimeError("Run.run() may be called once")
        self._run_called = True
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        reason, detail = ev.RULE_ERROR, ""
        try:
            try:
                await self._open_control()
                started = await self._start()
                if started:
                    reason, detail = await self._supervise()
                else:
                    reason, detail = ev.RULE_ERROR, self._stop_detail
            except asyncio.CancelledError:
                reason, detail = ev.RULE_USER_STOP, "the run was cancelled"
                self._cancel_inflight = True
                self._run_cancelled = True
                raise
            except Exception as exc:  # an engine bug: record it, end the run, say so
                self.internal_error = exc
                reason, detail = (
                    ev.RULE_ERROR,
                    f"internal error: {type(exc).__name__}: {one_line(exc)}",
                )
        finally:
            await self._shutdown(reason, detail)
        return self.state

    async def _open_control(self) -> None:
        """Serve the control channel (engine/control.py) so apps can attach; a run that
        cannot serve one goes on and says so."""
        server = None
        try:
            server = ControlServer(self, self.run_dir)
            await server.start()
        except Exception as exc:  # no Unix sockets here, a read-only runtime directory
            if server is not None:
                with contextlib.suppress(Exception):
                    await server.close()
            self._control_error = f"attach is off for this run: {one_line(exc)}"
            return
        self._control = server

    # --- steering (RunControl) ----------------------------------------------------------
    def _check_live(self) -> None:
        if not self._started:
            raise ValueError("the run has not started yet")
        if self.state.finished or self._closed:
            raise ValueError("the run has finished")

    def _branch(self, branch_id: str):
        b = self.state.branches.get(branch_id)
        if b is None:
            raise ValueError(f"no branch {branch_id}")
        return b

    async def prune(self, branch_id: str) -> None:
        self._check_live()
        b = self._branch(branch_id)
        if b.closed:
            raise ValueError(f"branch {branch_id} is already {b.status}")
        subtree = [
            x for x in self.state.subtree_branches(branch_id) if not self.state.branches[x].closed
        ]
        self._emit(ev.BranchPruned(branch_id=branch_id, pruned=tuple(subtree), by="user"))
        for gid in list(self.state.pending_gates):
            if self.state.gates[gid].branch_id in subtree:
                self._emit(
                    ev.GateResolved(gate_id=gid, decision="veto", by="user", note="branch pruned")
                )
        for bid in subtree:
            task = self._proposal_tasks.get(bid)
            if task is not None and not task.done():
                task.cancel()

    async def edit_hints(self, text: str, branch_id: str | None = None) -> None:
        self._check_live()
        if not isinstance(text, str):
            raise ValueError("hints must be text")
        if branch_id is not None:
            self._branch(branch_id)
        self._emit(ev.HintEdited(text=text, branch_id=branch_id, by="user"))

    def _pending_gate(self, gate_id: str):
        g = self.state.gates.get(gate_id)
        if g is None or not g.pending:
            raise ValueError(f"no pending gate {gate_id}")
        return g

    async def approve(self, gate_id: str) -> None:
        self._check_live()
        self._pending_gate(gate_id)
        self._emit(ev.GateResolved(gate_id=gate_id, decision="approve", by="user"))

    async def veto(self, gate_id: str, note: str = "") -> None:
        self._check_live()
        self._pending_gate(gate_id)
        self._emit(
            ev.GateResolved(gate_id=gate_id, decision="veto", by="user", note=one_line(note))
        )

    async def pause(self, branch_id: str | None = None) -> None:
        self._check_live()
        if branch_id is None:
            if self.state.paused:
                raise ValueError("the run is already paused")
            self._emit(ev.RunPaused(by="user"))
            return
        b = self._branch(branch_id)
        if b.closed:
            raise ValueError(f"branch {branch_id} is {b.status}")
        if b.paused:
            raise ValueError(f"branch {branch_id} is already paused")
        self._emit(ev.BranchPaused(branch_id=branch_id, by="user"))

    async def resume(self, branch_id: str | None = None) -> None:
        self._check_live()
        if branch_id is None:
            if not self.state.paused:
                raise ValueError("the run is not paused")
            self._emit(ev.RunResumed(by="user"))
            return
        b = self._branch(branch_id)
        if not b.paused or b.closed:
            raise ValueError(f"branch {branch_id} is not paused")
        self._emit(ev.BranchResumed(branch_id=branch_id, by="user"))

    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str:
        self._check_live()
        if self.state.stopping:
            raise ValueError("the run is stopping")
        a = self.state.attempts.get(from_attempt) if isinstance(from_attempt, int) else None
        if a is None:
            raise ValueError(f"no attempt {from_attempt}")
        label = one_line(strategy, 80) if strategy and strategy.strip() else a.strategy
        bid = self.state.next_branch_id
        self._emit(
            ev.BranchOpened(branch_id=bid, strategy=label, from_attempt=from_attempt, by="user")
        )
        self._spawn(bid)
        return bid

    async def set_target(self, target: float | None) -> None:
        self._check_live()
        if target is not None:
            try:
                target = float(target)
            except (TypeError, ValueError):
                raise ValueError("the target must be a number") from None
            if not target > 0:
                raise ValueError("the target must be a positive speedup")
        self._emit(ev.TargetChanged(target=target, by="user"))

    async def stop(self, reason: str = "user", cancel: bool = False) -> None:
        """Stop cleanly: proposals and gate waits are dropped, verifications finish and
        are recorded. A second stop (or cancel=True) cancels verifications too (recorded
        as AttemptCancelled; a resume re-runs them). Returns once StopRequested is logged;
        `run()` returns after RunFinished. While the best is being re-measured at the end,
        a stop ends the re-measure (recorded as a Notice)."""
        if self._confirm_task is not None and not self._confirm_task.done():
            self._confirm_task.cancel()
            return
        self._check_live()
        rule = reason if reason in _RULES else ev.RULE_USER_STOP
        detail = "" if reason in _RULES or reason == "user" else one_line(reason)
        if self.state.stopping:
            if self._cancel_inflight:
                raise ValueError("the run is already stopping")
            cancel = True
        self._request_stop(rule, by="user", cancel=cancel, detail=detail)

    # --- events ---------------------------------------------------------------------
    def _emit(self, event: ev.Event) -> ev.Event:
        stored = self.log.append(event)
        apply(self.state, stored)
        self._bus.publish(stored)
        self._wake()
        return stored

    def _runner_notice(self, level: str, message: str) -> None:
        if not self._closed:  # a runner may report after the run has ended
            self._emit(ev.Notice(level=level, message=one_line(message)))

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def _wait_change(self, timeout: float | None = None) -> None:
        assert self._loop is not None
        f = self._loop.create_future()
        self._waiters.append(f)
        try:
            async with asyncio.timeout(timeout):  # never swallows a cancel, unlike 3.11's wait_for
                await f
        except TimeoutError:
            pass

    def _request_stop(self, rule: str, *, by: str, cancel: bool = False, detail: str = "") -> None:
        if self.state.finished:
            return
        if self.state.stopping:
            # already stopping: only an escalation to cancelling in-flight work is news
            if cancel and not self._cancel_inflight:
                self._cancel_inflight = True
                reason = self.state.stop_reason or rule
                self._emit(ev.StopRequested(reason=reason, cancel=True, by=by))
            return
        self._stop_detail = detail
        self._cancel_inflight = cancel
        self._emit(ev.StopRequested(reason=rule, cancel=cancel, by=by))

    # --- the main loop ------------------------------------------------------------------
    async def _start(self) -> bool:
        failure = self._early_runner_error
        if failure is None:
            try:
                await self.runner.start()
            except Exception as exc:
                failure = exc
        runner_error = None
        if failure is not None:
            runner_error = f"the runner did not start: {one_line(failure)}"
        # after start(): a runner may learn its slot count (GPUs) only then
        self._slots = asyncio.Semaphore(max(1, int(self.runner.slots or 1)))
        info = self.runner.describe()
        if self._resumed:
            requeued = self._plan_resume()
            changed = {k: v for k, v in self._overrides.items()}
            self._emit(
                ev.RunReopened(
                    repaired_tail=self._repaired_tail,
                    requeued_attempts=tuple(requeued),
                    settings=changed,
                )
            )
        else:
            device = str(info.get("device") or self.options.device or "cpu")
            self._emit(
                ev.RunStarted(
                    run_id=self.run_id,
                    op=self.op.name,
                    op_kind=self.op.kind,
                    proposer=self.options.proposer,
                    model=self.options.model,
                    device=device,
                    gpu=info.get("gpu"),
                    runner=self.runner.name,
                    target=self.options.target,
                    settings=self.options.to_dict(),
                    speed_measured=device.startswith("cuda"),
                    sandbox=info.get("sandbox"),
                )
            )
        self._started = True
        profiling_off = await self._profiling_notice()
        if profiling_off:
            self._emit(ev.Notice(level="warning", message=profiling_off))
        if self.op.reference_note and not self._resumed:
            self._emit(ev.Notice(level="info", message=self.op.reference_note))
        knowledge = self.op.description.get("knowledge_files") or []
        if knowledge and not self._resumed:  # what the api/code proposers are given
            files = "; ".join(str(f) for f in knowledge)
            self._emit(ev.Notice(level="info", message=f"knowledge for the proposers: {files}"))
        for message in self._startup_notices:
            self._emit(ev.Notice(level="warning", message=message))
        if self._control_error:
            self._emit(ev.Notice(level="warning", message=self._control_error))
        walls = str(info.get("sandbox") or "")
        if walls.startswith("off"):  # said once per session, resumed ones too
            self._emit(
                ev.Notice(level="warning", message=f"sandbox {walls}: candidates run without walls")
            )
        self.runner.set_notice_sink(self._runner_notice)  # e.g. "host left the pool"
        if runner_error:
            self._emit(ev.Notice(level="error", message=runner_error))
            self._stop_detail = runner_error
            return False
        if not self._resumed:
            try:
                labels = list(self.proposer.strategies(self.op.description, self.options.branches))
            except ProposerError as exc:
                self._emit(ev.Notice(level="error", message=f"proposer: {one_line(exc)}"))
                self._stop_detail = f"proposer: {one_line(exc)}"
                return False
            labels = labels[: max(1, self.options.branches)] or ["default"]
            if self.op.start_label:
                await self._verify_start(labels)
            else:
                for label in labels:
                    self._emit(ev.BranchOpened(branch_id=self.state.next_branch_id, strategy=label))
        else:
            self._tell_proposer_resumed()
        for bid, b in self.state.branches.items():
            if not b.closed:
                self._spawn(bid)
        return True

    async def _verify_start(self, labels: list[str]) -> None:
        """The user's kernel is attempt #0, verified on the first branch before any
        proposal; the other branches open from it once it passed."""
        first = self.state.next_branch_id
        self._emit(ev.BranchOpened(branch_id=first, strategy=labels[0]))
        self._emit(ev.ProposalRequested(branch_id=first, parent_attempt=None))
        n = START_ATTEMPT
        self._next_number = max(self._next_number, n + 1)
        self._sources[n] = self.op.starting_source
        self._emit(
            ev.ProposalReceived(
                branch_id=first,
                attempt=n,
                parent_attempt=None,
                source_hash=self.log.write_source(n, self.op.starting_source),
                strategy=labels[0],
                move=f"the start: {self.op.start_label}, unchanged",
                undo_cost=ev.UNDO_LOW,
                undo_reason="nothing changed",
                proposer="start",
            )
        )
        await self._verify(first, n, self.op.starting_source)
        a = self.state.attempts.get(n)
        passed = a is not None and a.verdict == "pass"
        if a is not None and a.verdict == "fail":
            self._emit(
                ev.Notice(
                    level="warning",
                    message=f"attempt #0 ({self.op.start_label}) did not pass the verifier; "
                    "the branches start from its source anyway",
                )
            )
        for label in labels[1:]:
            self._emit(
                ev.BranchOpened(
                    branch_id=self.state.next_branch_id,
                    strategy=label,
                    from_attempt=n if passed else None,
                )
            )

    def _tell_proposer_resumed(self) -> None:
        """A proposer that keeps its own place (replay: a queue of saved sources) learns
        what this run already proposed: (branch label, source hash) in attempt order."""
        s = self.state
        label = {bid: b.strategy for bid, b in s.branches.items()}  # what propose() is asked for
        proposed = [
            (label.get(a.branch_id, a.strategy), a.source_hash)
            for _, a in sorted(s.attempts.items())
        ]
        self.proposer.resumed(self.op.description, self.options.branches, proposed)

    def _plan_resume(self) -> list[int]:
        """Attempts a killed or stopped run left without a verdict, grouped by branch."""
        requeued = []
        for n in sorted(self.state.attempts):
            a = self.state.attempts[n]
            b = self.state.branches.get(a.branch_id)
            if b is None or b.closed:
                continue
            gate_pending = a.status == GATED and a.gate_id in self.state.pending_gates
            if a.status in (PROPOSED, RUNNING_ATTEMPT, CANCELLED) or gate_pending:
                self._work.setdefault(a.branch_id, []).append(n)
                if not gate_pending:
                    requeued.append(n)
        return requeued

    def _busy(self) -> bool:
        return any(p in (PROPOSING, GATE, QUEUED, VERIFYING) for p in self._phase.values()) or any(
            self._work.values()
        )

    async def _supervise(self) -> tuple[str, str]:
        while True:
            s = self.state
            if s.stopping:
                return s.stop_reason or ev.RULE_USER_STOP, self._stop_detail
            hit = run_exit(s, now=self._clock())
            if hit is not None:
                self._request_stop(
                    hit[0], by="engine", cancel=hit[0] == ev.RULE_BUDGET_TIME, detail=hit[1]
                )
                continue
            hit = all_branches_done(s)
            if hit is not None:
                return hit
            hit = max_attempts_reached(s)
            if hit is not None and not self._busy():
                return hit
            if not s.branches or all(t.done() for t in self._tasks.values()):
                return ev.RULE_ALL_BRANCHES_DONE, "no branch is left to run"
            timeout = None
            limit = s.setting("time_limit_s")
            if limit is not None:
                timeout = max(0.05, limit - s.elapsed_at(self._clock()))
            await self._wait_change(timeout)

    async def _shutdown(self, reason: str, detail: str) -> None:
        try:
            if self._run_called and self._started:
                await self._drain_tasks()
                # replay: the saved sources it never proposed
                line = self.proposer.left_over() if not self.state.finished else None
                if line:
                    self._emit(ev.Notice(level="warning", message=one_line(line)))
                if not self.state.finished:
                    await self._confirm_at_end(reason)
                    best = self.state.attempts.get(self.state.best_attempt or -1)
                    self._emit(
                        ev.RunFinished(
                            reason=reason,
                            detail=detail,
                            best_attempt=self.state.best_attempt,
                            best_speedup=self.state.best_speedup,
                            best_vs_best=best.vs_best if best is not None else None,
                        )
                    )
        finally:
            self._closed = True
            if self._control is not None:
                with contextlib.suppress(Exception):
                    await self._control.close()
            with contextlib.suppress(Exception):
                await self.runner.close()
            self._bus.close()
            self.log.close()
            self._finished.set()

    async def _drain_tasks(self) -> None:
        """Cancel what may be cancelled, let verifications finish (or cancel them when a
        forced stop asks), and wait for every branch task."""
        while True:
            pending = [t for t in self._tasks.values() if not t.done()]
            if not pending:
                return
            for bid, task in self._tasks.items():
                if task.done():
                    continue
                if self._cancel_inflight or self._phase.get(bid) != VERIFYING:
                    task.cancel()
            assert self._loop is not None
            change = self._loop.create_future()
            self._waiters.append(change)
            await asyncio.wait([*pending, change], return_when=asyncio.FIRST_COMPLETED)
            if not change.done():
                change.cancel()

    # --- branches -------------------------------------------------------------------
    def _spawn(self, branch_id: str) -> None:
        self._phase[branch_id] = IDLE
        self._tasks[branch_id] = asyncio.ensure_future(self._branch_main(branch_id))

    async def _branch_main(self, bid: str) -> None:
        try:
            await self._branch_loop(bid)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # an engine bug in this branch: record it and stop the run
            self.internal_error = exc
            line = f"branch {bid}: internal error: {type(exc).__name__}: {one_line(exc)}"
            self._emit(ev.Notice(level="error", message=line, branch_id=bid))
            self._request_stop(ev.RULE_ERROR, by="engine", detail=line)
        finally:
            self._phase[bid] = DONE
            self._work.pop(bid, None)
            self._wake()

    async def _ready(self, bid: str) -> bool:
        """Wait while the run or this branch is paused; False once it must not go on."""
        while True:
            s = self.state
            b = s.branches[bid]
            if b.closed or s.stopping or s.finished:
                return False
            if not (s.paused or b.paused):
                return True
            self._phase[bid] = IDLE
            await self._wait_change()

    async def _branch_loop(self, bid: str) -> None:
        for n in list(self._work.get(bid, ())):
            a = self.state.attempts[n]
            go = True
            if a.status == GATED and a.gate_id is not None:
                go = await self._await_resumed_gate(bid, a.gate_id) == "approve"
            if go:
                if not await self._ready(bid):
                    return
                await self._verify(bid, n, self._source(n))
            self._work[bid].remove(n)
        while True:
            if not await self._ready(bid):
                return
            if attempts_left(self.state, self._reserved) <= 0:
                self._phase[bid] = IDLE
                await self._wait_change()
                continue
            if not await self._round(bid):
                return

    async def _round(self, bid: str) -> bool:
        """One proposal, its gate and its verification. False: the branch is done."""
        b = self.state.branches[bid]
        parent = b.head
        self._phase[bid] = PROPOSING
        self._reserved += 1
        reserved = True
        try:
            self._emit(ev.ProposalRequested(branch_id=bid, parent_attempt=parent))
            ctx = self._context(bid, parent)
            task = asyncio.ensure_future(self.proposer.propose(ctx))
            self._proposal_tasks[bid] = task
            try:
                proposal = await task
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise
                return True  # the proposal was cancelled by a prune; _ready() decides
            except ProposerExhausted as exc:
                detail = one_line(exc) or "no untried move left"
                self._emit(
                    ev.BranchExhausted(
                        branch_id=bid, rule=ev.RULE_PROPOSER_EXHAUSTED, detail=detail
                    )
                )
                return False
            except ProposerError as exc:
                return await self._proposal_failed(bid, one_line(exc), exc.retryable, exc.fatal)
            except Exception as exc:
                line = f"{type(exc).__name__}: {one_line(exc)}"
                return await self._proposal_failed(bid, line, False, False)
            finally:
                self._proposal_tasks.pop(bid, None)
            if (
                not isinstance(proposal, Proposal)
                or not isinstance(proposal.source, str)
                or not proposal.source.strip()
            ):
                return await self._proposal_failed(
                    bid, "the proposer returned no source", False, False
                )
            if self.state.branches[bid].closed or self.state.stopping:
                return False  # pruned or stopped meanwhile: the proposal is dropped unnumbered
            n = max(self._next_number, self.state.next_attempt)
            self._next_number = n + 1
            self._sources[n] = proposal.source
            source_hash = self.log.write_source(n, proposal.source)
            cost, reason = self._undo_cost(bid, parent, proposal)
            self._reserved -= 1
            reserved = False
            self._emit(
                ev.ProposalReceived(
                    branch_id=bid,
                    attempt=n,
                    parent_attempt=parent,
                    source_hash=source_hash,
                    strategy=proposal.strategy or b.strategy,
                    move=one_line(proposal.move or "(no description)"),
                    undo_cost=cost,
                    undo_reason=one_line(reason),
                    proposer=self.proposer.name or self.options.proposer,
                    model=proposal.model,
                    tokens_in=int(proposal.tokens_in or 0),
                    tokens_out=int(proposal.tokens_out or 0),
                    cost_usd=float(proposal.cost_usd or 0.0),
                    family=_family(proposal),
                    meta=_jsonable_meta(proposal),
                )
            )
        finally:
            if reserved:
                self._reserved -= 1
        gated = cost == ev.UNDO_HIGH
        if gated and await self._gate(bid, n, proposal.move, cost, reason) != "approve":
            return True
        if not await self._ready(bid):
            return False  # the attempt stays numbered and unverified; a resume verifies it
        await self._verify(bid, n, proposal.source)
        return True

    async def _proposal_failed(self, bid: str, line: str, retryable: bool, fatal: bool) -> bool:
        self._emit(ev.ProposalFailed(branch_id=bid, error=line, retryable=retryable))
        level = "error" if fatal else "warning"
        self._emit(ev.Notice(level=level, message=f"{bid}: proposer: {line}", branch_id=bid))
        if fatal:
            self._request_stop(ev.RULE_ERROR, by="engine", detail=f"proposer: {line}")
            return False
        failures = self.state.branches[bid].proposal_failures
        if failures >= PROPOSAL_FAILURE_LIMIT:
            detail = f"{failures} proposals in a row failed; last: {line}"
            self._emit(
                ev.BranchExhausted(branch_id=bid, rule=ev.RULE_REPEATED_FAILURE, detail=detail)
            )
            return False
        if retryable:
            await asyncio.sleep(min(self.retry_backoff_s * 2.0**failures, 30.0))
        return True

    def _undo_cost(self, bid: str, parent: int | None, proposal: Proposal) -> tuple[str, str]:
        s = self.state
        b = s.branches[bid]
        parent_family = s.attempts[parent].family if parent in s.attempts else None
        lineage: set[int] = set()
        node = b.head
        while node is not None and node not in lineage:
            lineage.add(node)
            node = s.attempts[node].parent if node in s.attempts else None
        return assess_undo(
            undo_cost=proposal.undo_cost,
            undo_reason=proposal.undo_reason,
            source=proposal.source,
            meta=dict(proposal.meta or {}),
            parent_family=parent_family,
            branch_holds_best=s.best_attempt is not None and s.best_attempt in b.attempts,
            branch_lineage=lineage,
        )

    async def _gate(self, bid: str, n: int, move: str, cost: str, reason: str) -> str:
        gid = self.state.next_gate_id
        policy = self.gate_policy
        timeout = self.options.gate_timeout_s if policy == "ask" else None
        self._emit(
            ev.GateRaised(
                gate_id=gid, branch_id=bid, attempt=n, move=one_line(move), undo_cost=cost,
                reason=one_line(reason), policy=policy, timeout_s=timeout,
            )
        )  # fmt: skip
        if policy != "ask":
            self._emit(ev.GateResolved(gate_id=gid, decision=policy, by="policy"))
            return policy
        return await self._await_gate(bid, gid)

    async def _await_resumed_gate(self, bid: str, gid: str) -> str:
        """A gate an earlier session left pending: this session's policy decides it when
        that policy is unattended (no one here may be able to answer), else it waits."""
        g = self.state.gates[gid]
        if g.pending and self.gate_policy != "ask":
            self._emit(
                ev.GateResolved(
                    gate_id=gid,
                    decision=self.gate_policy,
                    by="policy",
                    note=f"left pending by an earlier session; this session's policy is "
                    f"{self.gate_policy}",
                )
            )
        return await self._await_gate(bid, gid)

    async def _await_gate(self, bid: str, gid: str) -> str:
        self._phase[bid] = GATE
        g = self.state.gates[gid]
        while g.pending:
            timeout = None
            if g.deadline is not None:
                timeout = g.deadline - self._clock()
                if timeout <= 0:
                    self._emit(
                        ev.GateResolved(
                            gate_id=gid,
                            decision=self.options.gate_timeout_policy,
                            by="timeout",
                            note=f"no answer within {g.timeout_s:g}s",
                        )
                    )
                    break
            await self._wait_change(timeout)
        return g.decision or "veto"

    async def _verify(self, bid: str, n: int, source: str) -> None:
        assert self._slots is not None
        self._phase[bid] = QUEUED
        async with self._slots:
            if self.state.stopping or self.state.finished:
                return
            self._phase[bid] = VERIFYING
            request = VerifyRequest(
                op=self.op.wire,
                source=source,
                device=self.device,
                min_speedup=self.options.min_speedup,
                timeout_s=self.options.timeout_s,
            )
            retry = 0
            while True:
                started = self._start_attempt(bid, n, retry)
                # a runner that names its slot emits AttemptStarted when it takes one
                on_slot = started if self.runner.reports_slot else None
                if on_slot is None:
                    started("")
                try:
                    verdict = await self.runner.verify(
                        request, on_progress=self._progress_sink(n), on_slot=on_slot
                    )
                    started("")  # a runner that never named its slot: recorded anyway
                    break
                except asyncio.CancelledError:
                    started("")
                    self._emit(
                        ev.AttemptCancelled(attempt=n, branch_id=bid, reason="the run was stopped")
                    )
                    raise
                except RunnerLost as exc:
                    why = one_line(exc) or "the runner was lost"
                except Exception as exc:
                    why = f"the runner failed: {type(exc).__name__}: {one_line(exc)}"
                started("")  # lost before a slot was taken: started, then retried
                if retry >= MAX_RUNNER_RETRIES:
                    line = f"attempt {n}: runner lost {retry + 1} times ({why}); stopping"
                    self._emit(ev.Notice(level="error", message=line, branch_id=bid))
                    self._request_stop(ev.RULE_ERROR, by="engine", detail=line)
                    return
                retry += 1
                self._emit(ev.AttemptRetried(attempt=n, reason=why))
                await asyncio.sleep(self.retry_backoff_s * retry)
        self._record_verdict(bid, n, verdict)
        why = self._profile_reason(bid, n)
        if why:
            await self._profile(bid, n, why)

    # --- Nsight Compute profiles ---------------------------------------------------------
    def _profile_reason(self, bid: str, n: int) -> str:
        """Why attempt n (or its branch's best) is profiled now; "" when it is not."""
        if not self._profiling:
            return ""
        s = self.state
        a = s.attempts.get(n)
        done = self._profiled | set(s.profiles)
        if a is not None and a.verdict == "pass" and n not in done:
            if n == START_ATTEMPT and self.op.start_label:
                return "the start"
            if s.best_attempt == n:
                return "new best"
        b = s.branches[bid]
        if b.best_attempt is None or b.best_attempt in done:
            return ""
        since = [m for m in b.attempts if m > b.best_attempt and s.attempts[m].verdict]
        return "branch stalled" if len(since) == 3 else ""

    async def _profile(self, bid: str, n: int, why: str) -> None:
        from kernelladder.verifier.profile import profile_candidate

        target = n if why != "branch stalled" else self.state.branches[bid].best_attempt
        assert target is not None and self._slots is not None
        self._profiled.add(target)
        async with self._slots:  # the same GPU, between verifications
            outcome = await asyncio.to_thread(
                profile_candidate, self.op.wire, self._source(target),
                self.run_dir / "profiles", str(target), self.options.timeout_s,
            )  # fmt: skip
        if outcome.status == "unavailable":
            self._profiling = False  # said once; the run goes on without profiles
            self._emit(ev.Notice(level="warning", message=f"profiling off: {outcome.reason}"))
        report = ""
        if outcome.report:
            try:
                report = str(Path(outcome.report).relative_to(self.run_dir))
            except ValueError:
                report = outcome.report
        self._emit(
            ev.ProfileReady(
                attempt=target,
                branch_id=bid,
                status=outcome.status,
                reason=why if outcome.status == "ok" else outcome.reason,
                summary=outcome.summary.to_dict() if outcome.summary else {},
                report=report,
            )
        )

    async def _profiling_notice(self) -> str:
        """Decide once whether this run profiles; the line saying why not, if not."""
        if self.options.profile == "off":
            return ""
        if not self.device.startswith("cuda"):
            return ""
        if self.options.remote:
            return "profiling off: Nsight Compute runs with the local runner only"
        from kernelladder.verifier.profile import availability

        ok, line = await asyncio.to_thread(availability)
        self._profiling = ok
        return "" if ok else f"profiling off: {line}"

    def _start_attempt(self, bid: str, n: int, retry: int) -> Callable[[str], None]:
        """AttemptStarted for one try, emitted once: by the runner's on_slot when it has
        taken a slot (so the event says where it runs), else before the outcome."""
        done = [False]

        def started(slot: str) -> None:
            if done[0] or self._closed:
                return
            done[0] = True
            self._emit(
                ev.AttemptStarted(
                    attempt=n, branch_id=bid, runner=self.runner.name, slot=slot, retry=retry
                )
            )

        return started

    def _record_verdict(self, bid: str, n: int, verdict: Any) -> None:
        b = self.state.branches[bid]
        full = verdict.with_dead_ends(tuple(b.dead_ends)).to_dict()
        verdict_hash = self.log.write_verdict(n, full)
        self._verdicts[n] = full
        measured = self.state.speed_measured
        versus = standing_text(standing(verdict.timings)) if measured and verdict.passed else ""
        shapes = standing_shapes(verdict.timings) if measured and verdict.passed else {}
        versus_best = vs_best(verdict.timings) if measured and verdict.passed else None
        self._emit(
            ev.VerdictReady(
                attempt=n,
                branch_id=bid,
                verdict=verdict.verdict,
                verdict_kind=verdict.kind,
                gate=verdict.gate,
                speedup=verdict.speedup if self.state.speed_measured else None,
                floor_fraction=verdict.floor_fraction if self.state.speed_measured else None,
                noise=verdict.noise if self.state.speed_measured else None,
                summary=verdict_line(verdict, versus),
                verdict_hash=verdict_hash,
                elapsed_s=float(verdict.elapsed_s or 0.0),
                standing=versus,
                vs_best=None if versus_best is None else round(versus_best, 6),
                standing_shapes=shapes,
            )
        )
        better_branch, better_run = improvement(self.state, n)
        if better_branch:
            self._emit(
                ev.BestImproved(
                    attempt=n,
                    branch_id=bid,
                    speedup=self.state.attempts[n].speedup,
                    previous=b.best_speedup if b.best_speedup is not None else b.baseline_speedup,
                    overall=better_run,
                    vs_best=self.state.attempts[n].vs_best,
                )
            )
        if not b.closed:
            hit = branch_exit(self.state, b)
            if hit is not None:
                self._emit(ev.BranchExhausted(branch_id=bid, rule=hit[0], detail=hit[1]))

    # --- the end: the best re-measured -------------------------------------------------------
    async def _confirm_at_end(self, reason: str) -> None:
        """Re-measure the run's best (and the runner-up when within noise) in a fresh
        worker, back to back with the fastest baseline at every shape for CONFIRM_ROUNDS
        rounds; record BestConfirmed for each; when one does not hold, the next best is
        re-measured (CONFIRM_LIMIT in all). Skipped, with a Notice, where it cannot run."""
        s = self.state
        if not self.options.confirm or self._run_cancelled or self.internal_error is not None:
            return
        best = s.attempts.get(s.best_attempt) if s.best_attempt is not None else None
        if best is None:
            return
        if not s.speed_measured:
            self._emit(
                ev.Notice(
                    level="info",
                    message=f"best #{best.number} not re-measured: speed is not measured "
                    "without a GPU",
                )
            )
            return
        if reason == ev.RULE_ERROR:
            self._emit(
                ev.Notice(
                    level="warning",
                    message=f"best #{best.number} not re-measured: the run ended on an error",
                )
            )
            return
        ranked = [n for n in ranked_passes(s) if s.attempts[n].vs_best is not None]
        if not ranked:
            self._emit(
                ev.Notice(
                    level="info",
                    message=f"best #{best.number} not re-measured: no library baseline "
                    "ran to measure it against",
                )
            )
            return
        queue = ranked[:2] if _within_noise(s, ranked[0], ranked[1:2]) else ranked[:1]
        rest = ranked[len(queue) :]
        self._confirm_task = asyncio.ensure_future(self._confirm_queue(queue, rest))
        try:
            await self._confirm_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._run_cancelled or (current is not None and current.cancelling()):
                raise  # the run itself is being cancelled, not only the re-measure
            self._emit(ev.Notice(level="warning", message="re-measuring the best was stopped"))
        finally:
            self._confirm_task = None

    async def _confirm_queue(self, queue: list[int], rest: list[int]) -> None:
        held_any = False
        done = 0
        while queue and done < CONFIRM_LIMIT:
            n = queue.pop(0)
            # one fresh worker for the re-measures: later ones reuse it (its baselines)
            held = await self._confirm_one(n, fresh=done == 0)
            if held is None:  # the runner failed: said so; nothing more to re-measure
                return
            done += 1
            held_any = held_any or held
            if not queue and not held_any and rest:
                queue.append(rest.pop(0))

    async def _confirm_one(self, n: int, *, fresh: bool = True) -> bool | None:
        a = self.state.attempts[n]
        against = best_baseline_name(a.standing_shapes) or "the fastest baseline"
        self._emit(
            ev.Notice(
                level="info",
                message=f"re-measuring #{n} against {against}: {CONFIRM_ROUNDS} rounds back "
                f"to back per shape in {'a fresh' if fresh else 'the same fresh'} worker",
            )
        )
        request = VerifyRequest(
            op=self.op.wire,
            source=self._source(n),
            device=self.device,
            min_speedup=self.options.min_speedup,
            timeout_s=self.options.timeout_s,
            paired_rounds=CONFIRM_ROUNDS,
            pair_every_shape=True,
            fresh_worker=fresh,
        )
        try:
            verdict = await self.runner.verify(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            line = f"#{n} not re-measured: the runner failed: {one_line(exc)}"
            self._emit(ev.Notice(level="warning", message=line))
            return None
        with contextlib.suppress(OSError):
            text = json.dumps(verdict.to_dict(), indent=1, sort_keys=True)
            write_durable(self.run_dir / ATTEMPTS_DIR / f"{n}.confirm.json", text.encode())
        recorded = merit_of(a)
        if not verdict.passed:
            self._emit(
                ev.BestConfirmed(
                    attempt=n,
                    held=False,
                    recorded_vs_best=a.vs_best,
                    rounds=CONFIRM_ROUNDS,
                    detail=f"did not pass again: {verdict_line(verdict)}",
                )
            )
            return False
        shapes = standing_shapes(verdict.timings)
        again = vs_best(verdict.timings)
        band = max(verdict.noise or 0.0, MIN_NOISE)
        slower = sorted(label for label, row in shapes.items() if row["standing"] == "slower")
        why = ""
        if recorded.never_slower and slower:
            why = f"slower than the fastest baseline at {', '.join(slower)}"
        elif again is None:
            why = "no baseline ran to measure it against"
        elif a.vs_best is not None and again * (1.0 + band) < a.vs_best:
            why = (
                f"vs best {again:.3g}x, below {a.vs_best:.3g}x by more than the noise ({band:.1%})"
            )
        self._emit(
            ev.BestConfirmed(
                attempt=n,
                held=not why,
                vs_best=None if again is None else round(again, 6),
                recorded_vs_best=a.vs_best,
                shapes=shapes,
                noise=round(band, 6),
                rounds=CONFIRM_ROUNDS,
                detail=why,
            )
        )
        return not why

    def _progress_sink(self, n: int) -> Callable[[str, str], None]:
        """on_progress for one attempt: the first lines of each gate are recorded, at
        most PROGRESS_PER_GATE of them and one per PROGRESS_INTERVAL_S; the rest dropped."""
        seen: dict[str, int] = {}
        last = [0.0]

        def record(gate: str, message: str) -> None:
            if self._closed or self.state.attempts.get(n) is None:
                return
            if self.state.attempts[n].status != RUNNING_ATTEMPT:
                return
            count = seen.get(gate, 0)
            now = time.monotonic()
            if count >= PROGRESS_PER_GATE or (count and now - last[0] < PROGRESS_INTERVAL_S):
                return
            seen[gate] = count + 1
            last[0] = now
            self._emit(ev.AttemptProgress(attempt=n, gate=str(gate), message=one_line(message)))

        def on_progress(gate: str, message: str) -> None:
            if threading.get_ident() == self._loop_thread:
                record(gate, message)
            elif self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(record, gate, message)

        return on_progress

    # --- sources, verdicts, context ---------------------------------------------------------
    def _source(self, n: int | None) -> str:
        if n is None:
            return self.op.starting_source
        if n not in self._sources:
            self._sources[n] = read_attempt_source(self.run_dir, n)
        return self._sources[n]

    def _verdict(self, n: int) -> dict[str, Any] | None:
        a = self.state.attempts.get(n)
        if a is None or a.verdict is None:
            return None
        if n not in self._verdicts:
            try:
                self._verdicts[n] = read_attempt_verdict(self.run_dir, n)
            except (OSError, ValueError):
                return None
        return self._verdicts[n]

    def _context(self, bid: str, parent: int | None) -> ProposalContext:
        s = self.state
        b = s.branches[bid]
        latest = next((n for n in reversed(b.attempts) if s.attempts[n].verdict is not None), None)
        fb = ((self._verdict(latest) or {}).get("feedback") or {}) if latest is not None else {}
        feedback = {
            "expected": fb.get("expected", ""),
            "saw": fb.get("saw", ""),
            "fence": fb.get("fence") or self.op.description.get("fence", ""),
            "dead_ends": list(b.dead_ends),
            "vetoed_families": list(b.vetoed_families),
        }
        return ProposalContext(
            op=self.op.description,
            branch_id=bid,
            strategy=b.strategy,
            parent_attempt=parent,
            parent_source=self._source(parent),
            parent_verdict=self._verdict(parent) if parent is not None else None,
            feedback=feedback,
            dead_ends=tuple(b.dead_ends),
            hints=s.hints_for(bid),
            history=tuple({**h, "source": self._source(h["attempt"])} for h in s.history(bid)),
            best_source=self._source(s.best_attempt) if s.best_attempt is not None else None,
            device=self.device,
            vetoed_families=tuple(b.vetoed_families),
            vetoed_moves=tuple(b.vetoed_moves),
            stagnation=b.stagnation,
            stagnation_limit=s.setting("stagnation"),
            profile=self._profile_of(parent if parent is not None else START_ATTEMPT),
            hardware=self._hardware(),
        )

    def _profile_of(self, n: int) -> dict[str, Any] | None:
        """The summary of attempt n's profile, from the log (a resumed run has them too)."""
        taken = self.state.profiles.get(n) or {}
        return (
            dict(taken["summary"]) if taken.get("status") == "ok" and taken.get("summary") else None
        )

    def _hardware(self) -> dict[str, Any] | None:
        """What the latest verdict says of the machine it was judged on (GPU only)."""
        for n in sorted(self._verdicts, reverse=True):
            env = (self._verdicts[n] or {}).get("environment") or {}
            if env.get("gpu"):
                keys = ("gpu", "cc", "sms", "rates", "triton", "torch", "cuda")
                return {k: env[k] for k in keys if k in env}
        return None


_RULES = {
    ev.RULE_TARGET, ev.RULE_MAX_ATTEMPTS, ev.RULE_STAGNATION, ev.RULE_REPEATED_FAILURE,
    ev.RULE_BUDGET_ATTEMPTS, ev.RULE_BUDGET_TIME, ev.RULE_BUDGET_USD, ev.RULE_USER_STOP,
    ev.RULE_PROPOSER_EXHAUSTED, ev.RULE_ALL_BRANCHES_DONE, ev.RULE_ERROR,
}  # fmt: skip


def _within_noise(state: RunState, first: int, others: list[int]) -> bool:
    """Is the runner-up (others[0]) as good as the best within the noise: slower nowhere
    alike and vs best inside the larger noise of the two?"""
    if not others:
        return False
    a, b = merit_of(state.attempts[first]), merit_of(state.attempts[others[0]])
    if a.never_slower != b.never_slower or a.vs_best is None or b.vs_best is None:
        return False
    margin = max(a.noise or 0.0, b.noise or 0.0, MIN_NOISE)
    return b.vs_best * (1.0 + margin) >= a.vs_best


def _jsonable_meta(proposal: Proposal) -> dict[str, Any]:
    """The proposal's meta as plain JSON (it goes into the log)."""
    try:
        return json.loads(json.dumps(dict(proposal.meta or {}), default=str))
    except (TypeError, ValueError):
        return {}


def _family(proposal: Proposal) -> str | None:
    family = (proposal.meta or {}).get("family")
    return str(family) if family else None


# --- construction -------------------------------------------------------------------------


def _default_runner(options: RunOptions, device: str) -> Runner:
    from kernelladder.engine.runners import make_runner

    return make_runner(options, device)


def _default_proposer(options: RunOptions) -> Proposer:
    from kernelladder.engine.proposers import get_proposer

    cfg: dict[str, Any] = {}
    if options.model:
        cfg["model"] = options.model
    if options.replay_from:
        cfg["replay_from"] = options.replay_from
    return get_proposer(options.proposer, **cfg)


def _check_ready(proposer: Proposer) -> None:
    """A proposer that cannot write anything here (the api one without a key, the code
    one without its CLI) raises its ProposerError now, before the run's directory is made
    or its log touched (ProposerBase's default: ready at once)."""
    proposer.check_ready()


def _pick_device(options: RunOptions) -> str:
    if options.device:
        return options.device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def create_run(
    options: RunOptions,
    runner: Runner | None = None,
    proposer: Proposer | None = None,
    *,
    op: OpInfo | None = None,
    notices: Sequence[str] = (),
    gate_policy: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Run:
    """A new run in options.run_dir (default runs/<id>). Builds the local (or SSH) runner
    and the proposer when not given. Raises OpLoadError / ProposerError / ValueError with
    one line for bad input. `gate_policy`: this session's policy when it is not
    options.gate (which is what is saved), e.g. veto when no one can answer ask-gates."""
    info = op or load_op_info(options.op, options.start)
    device = _pick_device(options)
    options = replace(options, device=device)
    run_id = new_run_id(info.name)
    run_dir = Path(options.run_dir) if options.run_dir else Path("runs") / run_id
    if (run_dir / "events.jsonl").exists():
        raise ValueError(f"{run_dir} already holds a run (use --resume {run_dir})")
    options = replace(options, run_dir=str(run_dir))
    proposer = proposer or _default_proposer(options)
    # a proposer that cannot work on this op says so now, before any worker starts
    proposer.strategies(info.description, options.branches)
    _check_ready(proposer)
    runner = runner or _default_runner(options, device)
    return Run(
        options, run_dir=run_dir, op=info, runner=runner, proposer=proposer, run_id=run_id,
        notices=notices, gate_policy=gate_policy, clock=clock,
    )  # fmt: skip


# options a resume may change (budgets and policies; never the op, device or proposer)
RESUMABLE_OPTIONS = (
    "target", "max_attempts", "stagnation", "budget_usd", "time_limit_s", "gate",
    "gate_timeout_s", "gate_timeout_policy", "timeout_s", "hints", "target_over", "confirm",
    "ray_address", "ray_slots",  # a Ray run may find its cluster at a new address
)  # fmt: skip


def resume_run(
    run_dir: str | Path,
    runner: Runner | None = None,
    proposer: Proposer | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    notices: Sequence[str] = (),
    gate_policy: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Run:
    """Continue a killed or stopped run: a torn last line is cut, the log is folded,
    attempts left without a verdict are re-run under their own numbers, numbering goes
    on without reuse. `overrides` may change RESUMABLE_OPTIONS (recorded in RunReopened
    and saved); `gate_policy` is this session's only, as in create_run."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    try:
        options = RunOptions.from_dict(meta["options"])
        info = OpInfo.from_dict(meta["op"])
    except (KeyError, TypeError) as exc:
        raise LogError(f"{run_dir}: meta.json is incomplete ({exc})") from None
    changed = {}
    for key, value in (overrides or {}).items():
        if key not in RESUMABLE_OPTIONS:
            raise ValueError(f"--{key.replace('_', '-')} cannot change on resume")
        if getattr(options, key) != value:
            changed[key] = value
    options = replace(options, run_dir=str(run_dir), **changed)
    read_log(run_dir)  # a corrupt middle line stops here with LogError, before any change
    proposer = proposer or _default_proposer(options)
    _check_ready(proposer)  # no key, no CLI: stops here too
    repaired = repair_tail(run_dir)
    runner = runner or _default_runner(options, options.device or "cpu")
    run = Run(
        options, run_dir=run_dir, op=info, runner=runner, proposer=proposer,
        run_id=meta.get("run_id"), resumed=True, repaired_tail=repaired, overrides=changed,
        notices=notices, gate_policy=gate_policy, clock=clock,
    )  # fmt: skip
    if run._resumed:
        run.log.write_meta(
            {"run_id": run.run_id, "options": options.to_dict(), "op": info.to_dict()}
        )
    return run
