"""The run: K branches as asyncio tasks, each asking its proposer for a move, gating
risky moves, verifying through the runner and recording every fact as an event.

    run = create_run(RunOptions(op="rmsnorm", device="cpu"))
    sub = run.subscribe()          # the UI's event stream (bounded, never blocks us)
    state = await run.run()        # until a rule, a budget or a person ends it

Every state change is an event recorded through one Recorder: appended to the log,
folded into `self.state`, offered to subscribers. Steering commands (RunControl) check
that state (commands.py) and record their events. The run's parts are collaborators,
each handed the state, the recorder's emit (and wait) and what else it reads; Run
schedules them, one asyncio task per branch."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import Proposer, Runner
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.channels import Subscription
from kernelladder.engine.record.log import EventLog
from kernelladder.engine.record.state import AttemptStatus, RunState, fold, new_state
from kernelladder.engine.run import commands
from kernelladder.engine.run.best_confirmation import BestConfirmation
from kernelladder.engine.run.control import ControlServer
from kernelladder.engine.run.gate_keeper import GateKeeper
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import OpInfo
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.run.profiling import Profiling
from kernelladder.engine.run.proposal_inputs import ProposalInputs
from kernelladder.engine.run.proposal_intake import ProposalIntake
from kernelladder.engine.run.recorder import Recorder
from kernelladder.engine.run.rules import (
    all_branches_done,
    attempts_left,
    max_attempts_reached,
    run_exit,
)
from kernelladder.engine.run.run_part import RunHandles
from kernelladder.engine.run.session_opening import SessionOpening
from kernelladder.engine.run.verification import (
    DONE,
    GATE,
    IDLE,
    PROPOSING,
    QUEUED,
    VERIFYING,
    AttemptVerification,
)
from kernelladder.verifier.contract.verdict import Verdict

RETRY_BACKOFF_S = 1.0
GATE_POLICIES = ("ask", "approve", "veto")


class Run:
    """One optimization run. Implements RunControl (protocols.py)."""

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
        self._record = Recorder(self.log, self.state)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._phase: dict[str, str] = {}
        self._work: dict[str, list[int]] = {}  # resumed attempts to finish first, per branch
        self._slots: asyncio.Semaphore | None = None
        self._started = False
        self._run_called = False
        self._closed = False
        self._stop_detail = ""
        self._early_runner_error: Exception | None = None  # see runner_start_failed
        self._cancel_inflight = False
        self._run_cancelled = False  # run() itself was cancelled: end without re-measuring
        self._finished = asyncio.Event()
        self.internal_error: BaseException | None = None
        self._control: ControlServer | None = None  # attached apps steer through it
        self._control_error = ""
        self._compose(clock, repaired_tail, overrides or {}, notices)
        if not resumed:
            self.log.write_meta(
                {"run_id": self.run_id, "options": options.to_dict(), "op": op.to_dict()}
            )

    def _compose(
        self,
        clock: Callable[[], float],
        repaired_tail: bool,
        overrides: dict[str, Any],
        notices: Sequence[str],
    ) -> None:
        """The run's parts, each handed the state, the recorder's emit and what else it
        reads (the callables read what changes as the run goes: its device, its slots)."""
        state, emit, op, options, runner = (
            self.state, self._record.emit, self.op, self.options, self.runner
        )  # fmt: skip
        slots, stop = self._require_slots, self._request_stop

        def device() -> str:  # RunStarted names it
            return self.device

        self._gates = GateKeeper(
            state, emit, self._record.wait_change, clock, self.gate_policy, options
        )
        self._inputs = inputs = ProposalInputs(state, run_dir=self.run_dir, op=op, device=device)
        self._intake = ProposalIntake(
            state, emit, request_stop=stop, proposer=self.proposer,
            proposer_name=options.proposer, write_source=self.log.write_source,
            inputs=inputs, gates=self._gates, retry_backoff_s=RETRY_BACKOFF_S,
        )  # fmt: skip
        self._opening = SessionOpening(
            state, emit, runner=runner, proposer=self.proposer,
            record_start=self._intake.record_start, op=op, options=options, run_id=self.run_id,
            resumed=self._resumed, repaired_tail=repaired_tail, overrides=overrides,
            notices=notices,
        )  # fmt: skip
        handles = RunHandles(state, emit, runner, op.wire, options, device)
        self._verification = AttemptVerification(
            handles, request_stop=stop, slots=slots, inputs=inputs,
            write_verdict=self.log.write_verdict, set_phase=self._phase.__setitem__, closed=lambda: self._closed,
            retry_backoff_s=RETRY_BACKOFF_S,
        )  # fmt: skip
        self._profiles = Profiling(
            handles, start_label=op.start_label, source=inputs.source, run_dir=self.run_dir,
            slots=slots, wait_change_or=self._record.wait_change_or,
            forced_stop=lambda: self._cancel_inflight,
        )  # fmt: skip
        self._confirmation = BestConfirmation(
            handles, source=inputs.source, run_dir=self.run_dir,
            cancelled=lambda: self._run_cancelled,
            engine_failed=lambda: self.internal_error is not None,
        )  # fmt: skip

    def _require_slots(self) -> asyncio.Semaphore:
        assert self._slots is not None
        return self._slots

    # --- public ---------------------------------------------------------------------
    @property
    def retry_backoff_s(self) -> float:
        """Seconds before a lost runner's retry (times the retry) and a retryable
        proposer failure's (doubling); tests shorten it."""
        return self._verification.retry_backoff_s

    @retry_backoff_s.setter
    def retry_backoff_s(self, seconds: float) -> None:
        self._verification.retry_backoff_s = self._intake.retry_backoff_s = seconds

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
        return self._record.subscribe(maxsize=maxsize, from_seq=from_seq)

    async def wait_finished(self) -> RunState:
        await self._finished.wait()
        return self.state

    async def run(self) -> RunState:
        """Run until a rule, a budget or a stop ends it; returns the final state.
        The log is complete when this returns (RunFinished is its last event)."""
        if self._run_called:
            raise RuntimeError("Run.run() may be called once")
        self._run_called = True
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
            self._record.emit(event)
        self._intake.cancel(subtree)

    async def edit_hints(self, text: str, branch_id: str | None = None) -> None:
        self._check_live()
        self._record.emit(commands.hint_event(self.state, text, branch_id))
        for resolved in commands.gates_the_hints_avoid(self.state, branch_id):
            self._record.emit(resolved)

    async def approve(self, gate_id: str) -> None:
        self._check_live()
        self._record.emit(commands.approve_event(self.state, gate_id))

    async def veto(self, gate_id: str, note: str = "") -> None:
        self._check_live()
        self._record.emit(commands.veto_event(self.state, gate_id, note))

    async def pause(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._record.emit(commands.pause_event(self.state, branch_id))

    async def resume(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._record.emit(commands.resume_event(self.state, branch_id))

    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str:
        self._check_live()
        opened = commands.open_branch_event(self.state, from_attempt, strategy)
        self._record.emit(opened)
        self._spawn(opened.branch_id)
        return opened.branch_id

    async def set_target(self, target: float | None) -> None:
        self._check_live()
        self._record.emit(commands.target_event(self.state, target))

    async def stop(self, reason: str = "user", cancel: bool = False) -> None:
        """Stop cleanly: proposals and gate waits are dropped, verifications finish and
        are recorded. A second stop (or cancel=True) cancels verifications too (recorded
        as AttemptCancelled; a resume re-runs them). Returns once StopRequested is logged;
        `run()` returns after RunFinished. While the best is being re-measured at the end,
        a stop ends the re-measure (recorded as a Notice); with cancel=True, the profiles
        the end waits for are cancelled too."""
        rule, detail = commands.stop_rule(reason)
        if self._confirmation.stop():
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
        return self._record.emit(commands.deploy_event(self.state, fields)).seq

    # --- events ---------------------------------------------------------------------
    def _runner_notice(self, level: str, message: str) -> None:
        if not self._closed:  # a runner may report after the run has ended
            self._record.emit(ev.Notice(level=level, message=one_line(message)))

    def _request_stop(self, rule: str, *, by: str, cancel: bool = False, detail: str = "") -> None:
        if self.state.finished:
            return
        if self.state.stopping:
            # already stopping: only an escalation to cancelling in-flight work is news
            if cancel and not self._cancel_inflight:
                self._cancel_inflight = True
                reason = self.state.stop_reason or rule
                self._record.emit(ev.StopRequested(reason=reason, cancel=True, by=by))
            return
        self._stop_detail = detail
        self._cancel_inflight = cancel
        self._record.emit(ev.StopRequested(reason=rule, cancel=cancel, by=by))
        for resolved in commands.gates_a_stop_resolves(self.state):
            self._record.emit(resolved)

    # --- the main loop ------------------------------------------------------------------
    async def _start(self) -> bool:
        runner_error = await self._opening.start_runner(self._early_runner_error)
        # after start(): a runner may learn its slot count (GPUs) only then
        self._slots = asyncio.Semaphore(max(1, int(self.runner.slots or 1)))
        info = self.runner.describe()
        self._work.update(self._opening.open(info))
        self._started = True
        self._opening.tell(info, self._control_error)
        self.runner.set_notice_sink(self._runner_notice)  # e.g. "host left the pool"
        if runner_error:
            self._record.emit(ev.Notice(level="error", message=runner_error))
            self._stop_detail = runner_error
            return False
        # whether ncu is here is asked beside the first verifications (a verdict that
        # could be profiled waits for the answer: Profiling.known)
        self._profiles.start_check()
        if self._resumed:
            self._opening.tell_proposer()
        else:
            failure = await self._opening.open_branches(self._verify)
            if failure:
                self._stop_detail = failure
                return False
        for bid, b in self.state.branches.items():
            if not b.closed:
                self._spawn(bid)
        return True

    async def _gate(self, bid: str, n: int, move: str, cost: str, reason: str) -> str:
        """Raise a gate for attempt n and return its decision (the branch waits at it)."""
        return await self._gate_wait(bid, self._gates.raise_gate(bid, n, move, cost, reason))

    async def _gate_wait(self, bid: str, gid: str) -> str:
        self._phase[bid] = GATE
        return await self._gates.decision(gid)

    def _busy(self) -> bool:
        busy = (PROPOSING, GATE, QUEUED, VERIFYING)
        return any(p in busy for p in self._phase.values()) or any(self._work.values())

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
                self._confirmation.prepare()
            if not s.branches or all(t.done() for t in self._tasks.values()):
                return ev.RULE_ALL_BRANCHES_DONE, "no branch is left to run"
            timeout = None
            limit = s.setting("time_limit_s")
            if limit is not None:
                timeout = max(0.05, limit - s.elapsed_at(self._clock()))
            await self._record.wait_change(timeout)

    async def _shutdown(self, reason: str, detail: str) -> None:
        try:
            if self._run_called and self._started:
                self._confirmation.prepare()
                await self._drain_tasks()
                if self._cancel_inflight:
                    await self._profiles.drain()  # a forced stop cancels them now
                # replay: the saved sources it never proposed
                line = self.proposer.left_over() if not self.state.finished else None
                if line:
                    self._record.emit(ev.Notice(level="warning", message=one_line(line)))
                if not self.state.finished:
                    await self._profiles.known()  # its notice, if any, before the end
                    # beside the profiles still in flight: the GPU's arbiter keeps their
                    # turns on it apart from the re-measure's rounds
                    await self._confirmation.at_end(reason)
                    await self._profiles.drain()
                    with contextlib.suppress(Exception):  # kept workers: its notice, then the end
                        await self.runner.hand_back_workers()
                    best = self.state.attempts.get(self.state.best_attempt or -1)
                    self._record.emit(
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
            self._profiles.cancel()  # the run was cancelled before it waited for them
            if self._control is not None:
                with contextlib.suppress(Exception):
                    await self._control.close()
            with contextlib.suppress(Exception):
                await self.runner.close()
            self._record.close()
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
            await self._record.wait_change_or(pending)

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
            self._record.emit(ev.Notice(level="error", message=line, branch_id=bid))
            self._request_stop(ev.RULE_ERROR, by="engine", detail=line)
        finally:
            self._phase[bid] = DONE
            self._work.pop(bid, None)
            self._record.wake()

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
            await self._record.wait_change()

    def _go_idle(self, bid: str) -> None:
        """The branch waits for a change. Whoever waits on the branches being busy (the
        supervisor ends the run only once none is) hears of it: a branch that went idle
        without a word, just after the supervisor had looked, once left a run waiting
        forever at its last attempt."""
        if self._phase.get(bid) != IDLE:
            self._phase[bid] = IDLE
            self._record.wake()

    async def _branch_loop(self, bid: str) -> None:
        for n in list(self._work.get(bid, ())):
            a = self.state.attempts[n]
            go = True
            if a.status == AttemptStatus.GATED and a.gate_id is not None:
                go = await self._gate_wait(bid, self._gates.resumed(a.gate_id)) == "approve"
            elif commands.set_aside_by_stop(self.state, n):  # asked again, its timeout from now
                go = await self._gate(bid, n, a.move, a.undo_cost, a.undo_reason) == "approve"
            if go:
                if not await self._ready(bid):
                    return
                await self._verify(bid, n, self._inputs.source(n))
            self._work[bid].remove(n)
        while True:
            if not await self._ready(bid):
                return
            if attempts_left(self.state, self._intake.reserved) <= 0:
                self._go_idle(bid)
                await self._record.wait_change()
                continue
            if not await self._round(bid):
                return

    async def _round(self, bid: str) -> bool:
        """One proposal, its gate and its verification. False: the branch is done."""
        self._phase[bid] = PROPOSING
        got = await self._intake.ask(bid)
        if isinstance(got, bool):
            return got
        n, cost = got.attempt, got.undo_cost
        gated = cost == ev.UNDO_HIGH
        if gated and await self._gate(bid, n, got.move, cost, got.undo_reason) != "approve":
            return True
        if not await self._ready(bid):
            return False  # the attempt stays numbered and unverified; a resume verifies it
        await self._verify(bid, n, got.source)
        return True

    async def _verify(self, bid: str, n: int, source: str) -> None:
        """Attempt n verified, then what its verdict starts: the end's fresh worker after
        a pass, and its profile where one tells something new."""
        verdict: Verdict | None = await self._verification.verify(bid, n, source)
        if verdict is None:
            return
        if verdict.passed:
            self._confirmation.prepare()  # the end's fresh worker starts now, idle until then
        await self._profiles.after_verdict(bid, n)
