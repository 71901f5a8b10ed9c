"""The run: K branches as asyncio tasks, each asking its proposer for a move, gating
risky moves, verifying through the runner and recording every fact as an event.

    run = create_run(RunOptions(op="rmsnorm", device="cpu"))
    sub = run.subscribe()          # the UI's event stream (bounded, never blocks us)
    state = await run.run()        # until a rule, a budget or a person ends it

Every state change goes through `_emit`: the event is appended to the log (fsync'd),
folded into `self.state` with the same fold replay uses, then offered to subscribers.
Steering commands (RunControl) check that state (commands.py), emit their events and
wake whatever waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import (
    Proposal,
    Proposer,
    ProposerError,
    ProposerExhausted,
    Runner,
)
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.channels import Broadcaster, Subscription
from kernelladder.engine.record.log import EventLog
from kernelladder.engine.record.state import (
    CANCELLED,
    GATED,
    PROPOSED,
    RUNNING_ATTEMPT,
    VETOED,
    RunState,
    apply,
    fold,
    new_state,
)
from kernelladder.engine.run import commands
from kernelladder.engine.run.best_confirmation import BestConfirmation
from kernelladder.engine.run.branch_line import taken_meanwhile
from kernelladder.engine.run.control import ControlServer
from kernelladder.engine.run.gate_keeper import GateKeeper
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import START_ATTEMPT, OpInfo
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.run.profiling import Profiling
from kernelladder.engine.run.proposal_inputs import ProposalInputs
from kernelladder.engine.run.rules import (
    all_branches_done,
    attempts_left,
    max_attempts_reached,
    run_exit,
)
from kernelladder.engine.run.verification import (
    DONE,
    GATE,
    IDLE,
    PROPOSING,
    QUEUED,
    VERIFYING,
    AttemptVerification,
)

RETRY_BACKOFF_S = 1.0
GATE_POLICIES = ("ask", "approve", "veto")


class Run(AttemptVerification, ProposalInputs, BestConfirmation, Profiling):
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
        # this session's policy (never saved): options.gate, or an unattended one
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
        self._profiling_check: asyncio.Future[None] | None = None
        self._profiled: set[int] = set()
        self._profiling_best: set[int] = set()  # profiled as the start or a new best
        self._profile_tasks: set[asyncio.Task[None]] = set()  # profiles beside their branch
        self._confirm_prepared = False  # the re-measure's worker asked for ahead
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
        self._said: set[str] = set()  # proposers' notes already in this session's log
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
        self._gates = GateKeeper(
            self.state, self._emit, self._wait_change, clock, self.gate_policy, options
        )
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
        """The runner started before run() (to ask about an SSH host key) failed: run()
        records this as its runner's start failure instead of connecting again."""
        if self._run_called:
            raise RuntimeError("the runner's start failure must be handed over before run()")
        self._early_runner_error = error

    def subscribe(self, maxsize: int = 10_000, from_seq: int = 0) -> Subscription:
        """Every event from `from_seq` in order, then live ones, until the run finishes."""
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
        """Serve the control channel so apps can attach; without one the run goes on."""
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

    # --- steering (RunControl): the checks and events are commands.py's -----------------
    def _check_live(self) -> None:
        commands.check_live(self.state, started=self._started, closed=self._closed)

    async def prune(self, branch_id: str) -> None:
        self._check_live()
        events = commands.prune_events(self.state, branch_id)
        subtree = commands.pruned_subtree(self.state, branch_id)
        for event in events:
            self._emit(event)
        for bid in subtree:
            task = self._proposal_tasks.get(bid)
            if task is not None and not task.done():
                task.cancel()

    async def edit_hints(self, text: str, branch_id: str | None = None) -> None:
        self._check_live()
        self._emit(commands.hint_event(self.state, text, branch_id))
        for resolved in commands.gates_the_hints_avoid(self.state, branch_id):
            self._emit(resolved)

    async def approve(self, gate_id: str) -> None:
        self._check_live()
        self._emit(commands.approve_event(self.state, gate_id))

    async def veto(self, gate_id: str, note: str = "") -> None:
        self._check_live()
        self._emit(commands.veto_event(self.state, gate_id, note))

    async def pause(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._emit(commands.pause_event(self.state, branch_id))

    async def resume(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._emit(commands.resume_event(self.state, branch_id))

    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str:
        self._check_live()
        opened = commands.open_branch_event(self.state, from_attempt, strategy)
        self._emit(opened)
        self._spawn(opened.branch_id)
        return opened.branch_id

    async def set_target(self, target: float | None) -> None:
        self._check_live()
        self._emit(commands.target_event(self.state, target))

    async def stop(self, reason: str = "user", cancel: bool = False) -> None:
        """Stop cleanly: proposals and gate waits are dropped, verifications finish and
        are recorded. A second stop (or cancel=True) cancels verifications too (recorded
        as AttemptCancelled; a resume re-runs them). Returns once StopRequested is logged;
        `run()` returns after RunFinished. While the best is being re-measured at the end,
        a stop ends the re-measure (recorded as a Notice); with cancel=True, the profiles
        the end waits for are cancelled too."""
        rule, detail = commands.stop_rule(reason)
        if self._confirm_task is not None and not self._confirm_task.done():
            self._confirm_task.cancel()
            if cancel and not self._cancel_inflight:
                self._request_stop(rule, by="user", cancel=True, detail=detail)
            return
        self._check_live()
        if self.state.stopping:
            if self._cancel_inflight:
                raise ValueError("the run is already stopping")
            cancel = True
        self._request_stop(rule, by="user", cancel=cancel, detail=detail)

    async def record_deploy(self, fields: dict[str, Any]) -> int:
        """A live run's deploy recorded beside it (not steering); returns the event's seq."""
        if not self._started or self._closed:
            raise ValueError("the run's log is not open here")
        return self._emit(commands.deploy_event(self.state, fields)).seq

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
        for resolved in commands.gates_a_stop_resolves(self.state):
            self._emit(resolved)

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
        # whether ncu is here is asked beside the first verifications (a verdict that
        # could be profiled waits for the answer: _profiling_known)
        self._profiling_check = asyncio.ensure_future(self._profiling_decided())
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
            gate_pending = gate_pending or self._set_aside_by_stop(n)
            if a.status in (PROPOSED, RUNNING_ATTEMPT, CANCELLED) or gate_pending:
                self._work.setdefault(a.branch_id, []).append(n)
                if not gate_pending:
                    requeued.append(n)
        return requeued

    def _set_aside_by_stop(self, n: int) -> bool:
        """Was attempt n waiting at a gate when the run was stopped (the stop resolved it;
        a resume asks again)?"""
        a = self.state.attempts[n]
        g = self.state.gates.get(a.gate_id) if a.gate_id is not None else None
        return a.status == VETOED and g is not None and g.by == commands.STOPPED_BY

    async def _gate(self, bid: str, n: int, move: str, cost: str, reason: str) -> str:
        """Raise a gate for attempt n and return its decision (the branch waits at it)."""
        return await self._gate_wait(bid, self._gates.raise_gate(bid, n, move, cost, reason))

    async def _gate_wait(self, bid: str, gid: str) -> str:
        self._phase[bid] = GATE
        return await self._gates.decision(gid)

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
            if hit is not None:  # the last attempts are verified: start the end's worker
                self._prepare_confirm()
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
                self._prepare_confirm()
                await self._drain_tasks()
                if self._cancel_inflight:
                    await self._drain_profiles()  # a forced stop cancels them now
                # replay: the saved sources it never proposed
                line = self.proposer.left_over() if not self.state.finished else None
                if line:
                    self._emit(ev.Notice(level="warning", message=one_line(line)))
                if not self.state.finished:
                    await self._profiling_known()  # its notice, if any, before the end
                    # beside the profiles still in flight: the GPU's arbiter keeps their
                    # turns on it apart from the re-measure's rounds
                    await self._confirm_at_end(reason)
                    await self._drain_profiles()
                    with contextlib.suppress(Exception):  # kept workers: its notice, then the end
                        await self.runner.hand_back_workers()
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
            for task in self._profile_tasks:  # the run was cancelled before it waited for them
                task.cancel()
            if self._profiling_check is not None:
                self._profiling_check.cancel()
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
            await self._wait_change_or(pending)

    async def _wait_change_or(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until one of `tasks` is done or the next event is recorded (a stop's among them)."""
        assert self._loop is not None
        change = self._loop.create_future()
        self._waiters.append(change)
        await asyncio.wait([*tasks, change], return_when=asyncio.FIRST_COMPLETED)
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
            self._go_idle(bid)
            await self._wait_change()

    def _go_idle(self, bid: str) -> None:
        """The branch waits for a change. Whoever waits on the branches being busy (the
        supervisor ends the run only once none is) hears of it: a branch that went idle
        without a word, just after the supervisor had looked, once left a run waiting
        forever at its last attempt."""
        if self._phase.get(bid) != IDLE:
            self._phase[bid] = IDLE
            self._wake()

    async def _branch_loop(self, bid: str) -> None:
        for n in list(self._work.get(bid, ())):
            a = self.state.attempts[n]
            go = True
            if a.status == GATED and a.gate_id is not None:
                go = await self._gate_wait(bid, self._gates.resumed(a.gate_id)) == "approve"
            elif self._set_aside_by_stop(n):  # asked again, its timeout from now
                go = await self._gate(bid, n, a.move, a.undo_cost, a.undo_reason) == "approve"
            if go:
                if not await self._ready(bid):
                    return
                await self._verify(bid, n, self._source(n))
            self._work[bid].remove(n)
        while True:
            if not await self._ready(bid):
                return
            if attempts_left(self.state, self._reserved) <= 0:
                self._go_idle(bid)
                await self._wait_change()
                continue
            if not await self._round(bid):
                return

    async def _round(self, bid: str) -> bool:
        """One proposal, its gate and its verification. False: the branch is done."""
        b = self.state.branches[bid]
        shown = b.head  # what the proposer is shown; the proposal names what it came from
        self._phase[bid] = PROPOSING
        self._reserved += 1
        reserved = True
        try:
            self._emit(ev.ProposalRequested(branch_id=bid, parent_attempt=shown))
            ctx = self._context(bid, shown)
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
                return await self._proposal_failed(
                    bid, one_line(exc), exc.retryable, exc.fatal, exc
                )
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
            self._say_once(getattr(proposal, "notice", None))
            if self.state.branches[bid].closed or self.state.stopping:
                # pruned or stopped meanwhile: dropped unnumbered, what it cost counted
                if proposal.tokens_in or proposal.tokens_out or proposal.cost_usd:
                    self._emit(ev.ProposalFailed.of(bid, "dropped: its branch closed", proposal))
                return False
            stale = taken_meanwhile(self.state, bid, _family(proposal), ctx.closed_families)
            if stale is not None and not self.proposer.replays_recorded_undo:
                # dropped unnumbered; the next context names the family as closed
                self._emit(ev.Notice(level="info", message=f"{stale}; asked again", branch_id=bid))
                return True
            n = max(self._next_number, self.state.next_attempt)
            self._next_number = n + 1
            self._sources[n] = proposal.source
            source_hash = self.log.write_source(n, proposal.source)
            parent = self._gates.parent_of(bid, shown, proposal)
            recorded = self.proposer.replays_recorded_undo
            cost, reason = self._gates.undo_cost(bid, parent, proposal, recorded)
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


def _jsonable_meta(proposal: Proposal) -> dict[str, Any]:
    """The proposal's meta as plain JSON (it goes into the log)."""
    try:
        return json.loads(json.dumps(dict(proposal.meta or {}), default=str))
    except (TypeError, ValueError):
        return {}


def _family(proposal: Proposal) -> str | None:
    family = (proposal.meta or {}).get("family")
    return str(family) if family else None
