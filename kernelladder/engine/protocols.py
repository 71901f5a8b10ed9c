"""The engine's seams: Runner (where candidates are verified), Proposer (who writes
them), RunControl (the steering API the app calls) and the requests and proposals that
cross them, with the bases that declare a backend's optional hooks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kernelladder.verifier.contract.verdict import Verdict

# --- runners --------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyRequest:
    op: str | dict[str, str]  # built-in op name, or {"kernelbench": source, "name": file name}
    source: str  # candidate source
    device: str  # "cuda" | "cpu"
    min_speedup: float = 1.0
    timeout_s: float = 300.0
    suite: str | None = None  # None: the device's suite
    baselines: bool = True  # measure library baselines (cached per worker)
    # the run's end re-measures its best: more back-to-back rounds with the fastest
    # baseline, at every shape, in a worker started afresh (None/False: the speed gate's own)
    paired_rounds: int | None = None
    pair_every_shape: bool = False
    # the rounds stop once the sign test's word over paired_rounds is settled (a tie:
    # some round won and some lost), after at least this many (None: every round)
    paired_min_rounds: int | None = None
    fresh_worker: bool = False
    unseen_seed: int | None = None  # None: fresh unseen shapes (a verdict names its seed)
    pipeline: bool = False  # compile ahead, then the GPU per stage (verifier/worker/gates.py)
    # the branch's best ({"attempt", "timings": {shape: ms}, "noise"}): a candidate clearly
    # slower at the largest shape stops after a first look (None: every shape in full)
    early_stop: dict[str, Any] | None = None


ProgressFn = Callable[[str, str], None]  # (gate, message)


class RunnerLost(Exception):
    """Infrastructure failure (not the candidate's fault): the attempt may be re-run."""


NoticeFn = Callable[[str, str], None]  # (level, message): a Notice event in the run's log
SlotFn = Callable[[str], None]  # the slot an attempt took, e.g. "cuda:1" or "box:0"


@runtime_checkable
class Runner(Protocol):
    """Every member is required; RunnerBase gives the optional hooks their defaults, so a
    runner that subclasses it implements the whole protocol."""

    name: str  # e.g. "local", "ssh:user@host"
    reports_slot: bool  # True: verify() calls on_slot(slot) once the attempt has a slot

    @property
    def slots(self) -> int:
        """How many candidates it verifies at once (workers per GPU times GPUs; one on the
        CPU)."""
        ...

    async def start(self) -> None: ...

    async def verify(
        self,
        request: VerifyRequest,
        on_progress: ProgressFn | None = None,
        on_slot: SlotFn | None = None,
    ) -> Verdict:
        """A verdict for every candidate fault (crash, hang, cheat); RunnerLost when the
        runner itself failed and the attempt should be retried elsewhere or later."""
        ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """{"device": "cuda"|"cpu", "gpu": name|None, "slots": n, "host": ...}"""
        ...

    def set_notice_sink(self, sink: NoticeFn | None) -> None:
        """Where the runner's own news goes (e.g. "host left the pool"); the engine sets
        it once the run has started."""
        ...

    def gpu_alone(self) -> contextlib.AbstractAsyncContextManager[None]:
        """While it is held, none of the runner's workers uses the local GPUs."""
        ...

    def gpu_shared(self) -> contextlib.AbstractAsyncContextManager[None]:
        """While it is held, no worker times on the local GPUs (correctness may run)."""
        ...


class RunnerBase:
    """The optional runner hooks, declared once with their defaults (as an adapter base
    declares the optional capabilities a backend may offer): a runner subclasses this,
    implements slots/start/verify/close/describe, and overrides what it offers.

    - reports_slot: set True when verify() calls on_slot(slot) as the attempt takes a
      slot; the engine then records AttemptStarted with that slot (else with none).
    - notice(level, message): a one-line Notice in the run's log; notices raised before
      the engine set the sink are kept and delivered when it is set.
    - gpu_alone(): an async context in which nothing of this runner's uses the local
      GPUs (an Nsight Compute profile runs there); by default a context that waits for
      nothing (one worker per GPU: the engine's slot is enough).
    - gpu_shared(): the same for work that may run beside correctness but not beside a
      timing (a profile's warm-up); by default a context that waits for nothing.
    - prepare_fresh_worker(op): start the worker a coming fresh_worker request will get,
      and compile op's baselines there, so the end's re-measure does not wait for a
      worker's start or a compile; by default nothing.
    - hand_back_workers(): at the run's end, before RunFinished, keep the idle workers
      warm for the next run (the local runner hands them to verifier/host/keeper.py) and say
      so in a notice; by default nothing (close() shuts them down).
    """

    name: str = "runner"
    reports_slot: bool = False
    _notice_sink: NoticeFn | None = None
    _pending_notices: tuple[tuple[str, str], ...] = ()  # raised before the sink was set

    def set_notice_sink(self, sink: NoticeFn | None) -> None:
        self._notice_sink = sink
        pending, self._pending_notices = self._pending_notices, ()
        for level, message in pending:
            self.notice(level, message)

    def gpu_alone(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def gpu_shared(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def prepare_fresh_worker(self, op: Any = None) -> None:
        """Start, in the background, the worker a later fresh_worker request will use
        (the end's re-measure, started while the last attempts are verified), and have it
        compile `op`'s torch.compile baselines (its wire form) once up; by default
        nothing (the fresh worker starts when asked)."""

    async def hand_back_workers(self) -> None:
        """At the run's end (the last verification done, before RunFinished): keep idle
        workers for the next run, and say so with notice(); by default nothing."""

    def notice(self, level: str, message: str) -> None:
        if self._notice_sink is None:
            self._pending_notices = (*self._pending_notices, (level, message))
            return
        with contextlib.suppress(Exception):  # a failing sink must not fail the runner
            self._notice_sink(level, message)


# --- proposers ----------------------------------------------------------------------------


class ProposerError(Exception):
    """A proposer could not produce a candidate; the message is one line for a person.
    A reply that was paid for and then rejected (no code block, no text) carries what it
    spent, which the engine counts against the budgets like any proposal's."""

    def __init__(self, message: str, *, retryable: bool = False, fatal: bool = False):
        super().__init__(message)
        self.retryable = retryable
        self.fatal = fatal  # e.g. no API key: stop asking this proposer
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.model: str | None = None
        self.notice: str | None = None  # said once in the run's log (e.g. tokens estimated)

    def spent(self, *, tokens_in: int, tokens_out: int, cost_usd: float, model: str | None,
              notice: str | None = None) -> ProposerError:  # fmt: skip
        """This error, with what its reply cost (returned, to raise in one line)."""
        self.tokens_in, self.tokens_out, self.cost_usd = tokens_in, tokens_out, cost_usd
        self.model = model
        self.notice = notice
        return self


class ProposerExhausted(Exception):
    """The proposer has no untried move left for this branch."""


@dataclass(frozen=True)
class ProposalContext:
    op: dict[str, Any]  # OpSpec.describe(): name, signature, shapes, fence
    branch_id: str
    strategy: str  # the branch's strategy label
    parent_attempt: int | None
    parent_source: str  # the parent's source (the starting candidate at first)
    parent_verdict: dict[str, Any] | None  # Verdict.to_dict() of the parent, if judged
    feedback: dict[str, Any]  # {expected, saw, fence, dead_ends} of the latest attempt
    dead_ends: tuple[str, ...]  # moves already tried and failed or vetoed on this branch
    hints: str  # global hints + this branch's hints, as the person wrote them
    history: tuple[dict[str, Any], ...] = ()  # this branch's attempts: move, verdict, speedup
    best_source: str | None = None  # best passing source of the run so far
    device: str = "cpu"
    vetoed_families: tuple[str, ...] = ()  # families the person vetoed on this branch
    vetoed_moves: tuple[str, ...] = ()  # steps (move lines) the person vetoed on this branch
    stagnation: int = 0  # judged attempts on this branch since its last gain
    stagnation_limit: int | None = None  # the stagnation exit rule (None: off)
    profile: dict[str, Any] | None = None  # Nsight Compute summary of the parent, if taken
    hardware: dict[str, Any] | None = None  # the GPU the verifier judges on, if known
    # the branch's line (engine/run/branch_line.py): the family it works in, and the families
    # it may not change to, with why (another live branch's line, one it left, a veto)
    line_family: str | None = None
    closed_families: Mapping[str, str] = field(default_factory=dict)
    # the parent's proposal meta as recorded (the search's grid point: family, params)
    parent_meta: Mapping[str, Any] = field(default_factory=dict)


class _ShownParent:
    """The default base of a proposal: the parent the context showed the proposer."""

    def __repr__(self) -> str:
        return "SHOWN_PARENT"


SHOWN_PARENT: Any = _ShownParent()


@dataclass(frozen=True)
class Proposal:
    """A candidate and the move that made it. `base_attempt` is the attempt its source was
    derived from, which the engine records as its parent: SHOWN_PARENT (the default) for
    the context's parent_attempt (a model's reply, an edit of parent_source), an attempt
    number for another attempt the proposer stepped from, None for the op's starting
    source. `move`, the undo cost, gates and diffs are all read against that parent."""

    source: str
    strategy: str
    move: str  # one line: what changed against the parent
    undo_cost: str  # "low" | "medium" | "high"
    undo_reason: str
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. search parameters
    base_attempt: int | None = SHOWN_PARENT
    notice: str | None = None  # said once in the run's log (e.g. "tokens estimated: ...")


@runtime_checkable
class Proposer(Protocol):
    """Every member is required; ProposerBase gives the optional hooks their defaults."""

    name: str  # "search" | "api" | "code" | "replay"
    # its proposals carry the undo cost a saved run recorded for them (replay): the engine
    # keeps that rating instead of rating the move on this run's lines (gating.py)
    replays_recorded_undo: bool

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        """Labels for the K branches opened at the start of a run."""
        ...

    async def propose(self, ctx: ProposalContext) -> Proposal:
        """Raises ProposerError (one line) or ProposerExhausted."""
        ...

    def check_ready(self) -> None:
        """Raises ProposerError (one line) when it cannot write anything here (no API
        key, no CLI), before the run's directory is made or its log touched."""
        ...

    def resumed(self, op: dict[str, Any], k: int, proposed: list[tuple[str, str]]) -> None:
        """On resume: what the run already proposed, (branch label, source hash) in
        attempt order, for a proposer that keeps its own place (replay's queue)."""
        ...

    def left_over(self) -> str | None:
        """At the end of an unfinished run: one line about what it never proposed."""
        ...


class ProposerBase:
    """The optional proposer hooks with their defaults: ready at once, keeps no place of
    its own, leaves nothing over. A proposer subclasses this and overrides what applies."""

    name: str = "proposer"
    replays_recorded_undo: bool = False

    def check_ready(self) -> None:
        return None

    def resumed(self, op: dict[str, Any], k: int, proposed: list[tuple[str, str]]) -> None:
        return None

    def left_over(self) -> str | None:
        return None


# --- steering --------------------------------------------------------------------------


class RunControl(Protocol):
    """Commands in, events out. Each call records its event in the log and returns once
    the event is published; a command that does not apply raises ValueError with one
    line (e.g. "no pending gate g3")."""

    async def prune(self, branch_id: str) -> None: ...
    async def edit_hints(self, text: str, branch_id: str | None = None) -> None: ...
    async def approve(self, gate_id: str) -> None: ...
    async def veto(self, gate_id: str, note: str = "") -> None: ...
    async def pause(self, branch_id: str | None = None) -> None: ...
    async def resume(self, branch_id: str | None = None) -> None: ...
    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str: ...
    async def set_target(self, target: float | None) -> None: ...
    async def stop(self, reason: str = "user") -> None: ...

    def subscribe(self, maxsize: int = 10_000) -> AsyncIterator[Any]:
        """Events from now on (and, for a late subscriber, everything already logged
        first), through a bounded channel of its own. A slow subscriber never blocks the
        engine: when its channel is full it is marked lagging and re-reads the missed
        events from the log, so it loses none."""
        ...
