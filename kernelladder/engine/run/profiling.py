"""Nsight Compute profiles taken during a run: whether the run profiles at all, which
attempts are profiled and why (and which are not, said in the log), the ProfileReady
each records.

A profile asks for the GPU only while it uses it (verifier/host/profile.py): nothing while
ncu and Python start and load the candidate, the GPU beside correctness runs while it
warms up, the GPU to itself only while ncu replays the profiled call. The start's
profile is waited for (the first proposals and the person read it first); every later
one runs beside its branch, which goes on proposing and verifying, and the proposals
asked for after it lands read it."""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.standing_rank import is_gain, merit_of
from kernelladder.engine.record.state import RunState
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import START_ATTEMPT
from kernelladder.engine.run.rules import attempts_left
from kernelladder.engine.run.run_part import RunHandles, RunPart

PROFILED_AS_BEST = ("the start", "new best")
# the profile's phases as its attempt's log says them (AttemptProgress, gate "profile")
PROFILE_PHASES = {
    "start": "profile: ncu and the profiled process starting (no GPU held)",
    "warm": "profile: warming up (the GPU beside correctness runs)",
    "replay": "profile: ncu replaying the call (the GPU to itself)",
    "export": "profile: exporting the report (no GPU held)",
}


def profile_lands_late(proposals_left: int, walls: list[float], gaps: list[float]) -> str:
    """Why a profile would land after the last of `proposals_left` proposals (a branch's,
    each about the median of `gaps` apart while the profile takes about the median of
    this run's `walls`), else "" (also with too few figures to tell)."""
    if not walls or len(gaps) < 2:
        return ""
    wall, gap = statistics.median(walls), statistics.median(gaps)
    during = wall / gap if gap > 0 else float("inf")
    if during <= proposals_left + 0.5:  # a proposal may well still read it
        return ""
    return (
        f"it would land after the branch's last proposal ({max(0, proposals_left)} left, "
        f"one every {gap:.1f} s; a profile takes about {wall:.0f} s)"
    )


def stalled_profile_late(state: RunState, bid: str) -> str:
    """Why a stalled branch's profile would inform none of its proposals (it lands
    after the branch's last one), else "". Judged from this run's own figures: the
    profiles' wall so far, the branch's time between verdicts, the attempts it has
    left before its stagnation stop and of the run's max-attempts."""
    s = state
    b = s.branches[bid]
    walls = [
        float(p["wall_s"]) for p in s.profiles.values() if isinstance(p.get("wall_s"), int | float)
    ]
    judged = sorted(t for m in b.attempts if (t := s.attempts[m].judged_ts) is not None and t > 0)[
        -4:
    ]
    gaps = [later - earlier for earlier, later in zip(judged, judged[1:], strict=False)]
    bounds = []  # what the branch has left: of the run's attempts, before its stagnation stop
    if s.setting("max_attempts"):  # the run's attempts, shared by its open branches
        open_branches = sum(1 for x in s.branches.values() if not x.closed)
        bounds.append(math.ceil(attempts_left(s) / max(1, open_branches)))
    if limit := s.setting("stagnation"):
        bounds.append(int(limit) - b.stagnation)
    if not bounds:
        return ""
    in_flight = sum(1 for m in b.attempts if not s.attempts[m].verdict)
    return profile_lands_late(min(bounds) - in_flight, walls, gaps)


class Profiling(RunPart):
    def __init__(
        self,
        run: RunHandles,
        *,
        start_label: str,
        source: Callable[[int], str],
        run_dir: Path,
        slots: Callable[[], asyncio.Semaphore],
        wait_change_or: Callable[[list[asyncio.Task[None]]], Awaitable[None]],
        forced_stop: Callable[[], bool],
    ) -> None:
        super().__init__(run)
        self._start_label = start_label  # the op starts from the user's kernel (#0)
        self._mode = run.options.profile
        self._remote = run.options.remote
        self._pipelined = run.options.pipelined
        self._source = source  # attempt n's source
        self._run_dir = run_dir  # profiles are kept under it
        self._slots = slots  # the engine's verification slots, made once the runner started
        self._wait_change_or = wait_change_or  # until a task is done or an event recorded
        self._forced_stop = forced_stop  # a stop that cancels what is in flight
        self._on = False  # Nsight Compute profiles (decided at start)
        self._check: asyncio.Future[None] | None = None
        self._profiled: set[int] = set()
        self._profiling_best: set[int] = set()  # profiled as the start or a new best
        self._tasks: set[asyncio.Task[None]] = set()  # profiles beside their branch

    def start_check(self) -> None:
        """Ask whether this run profiles, beside the first verifications (a verdict that
        could be profiled waits for the answer)."""
        self._check = asyncio.ensure_future(self._decided())

    async def known(self) -> None:
        """Wait for the start's decision on profiling (asked beside the first attempts)."""
        if self._check is not None and not self._check.done():
            await asyncio.shield(self._check)

    async def after_verdict(self, bid: str, n: int) -> None:
        """Profile attempt n (or its stalled branch's best) where it tells something new:
        the start is waited for (what the first proposals and the person read first);
        later ones run beside the branch, and proposals asked after they land read them."""
        await self.known()
        why = self._reason(bid, n)
        if why == "the start":
            await self._profile(bid, n, why)
        elif why:
            self._beside(bid, n, why)

    async def drain(self) -> None:
        """Wait for the profiles in flight; a forced stop cancels them, also one that
        comes while this waits (the run's end waits here for its last profiles)."""
        while self._tasks:
            pending = list(self._tasks)
            if self._forced_stop():
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                continue
            await self._wait_change_or(pending)

    def cancel(self) -> None:
        """The run ends without waiting: the profiles in flight and the check cancelled."""
        for task in self._tasks:
            task.cancel()
        if self._check is not None:
            self._check.cancel()

    def _reason(self, bid: str, n: int) -> str:
        """Why attempt n (or its branch's best) is profiled now; "" when it is not (a
        Notice says so where a profile was skipped as telling nothing new)."""
        if not self._on:
            return ""
        s = self._state
        a = s.attempts.get(n)
        done = self._profiled | set(s.profiles)
        if a is not None and a.verdict == "pass" and n not in done:
            if n == START_ATTEMPT and self._start_label:
                return "the start"
            if s.best_attempt == n:
                last = self._last_profiled_best()
                if last is None or is_gain(merit_of(s.attempts[last]), merit_of(a)):
                    return "new best"
                self._profiled.add(n)  # decided once
                self._emit(
                    ev.Notice(
                        level="info",
                        message=f"profile of #{n} skipped: a new best within the noise of "
                        f"#{last}, profiled already",
                        branch_id=bid,
                    )
                )
                return ""
        b = s.branches[bid]
        if b.best_attempt is None or b.best_attempt in done:
            return ""
        since = [m for m in b.attempts if m > b.best_attempt and s.attempts[m].verdict]
        if len(since) != 3:
            return ""
        late = stalled_profile_late(s, bid)
        if late:
            self._profiled.add(b.best_attempt)  # decided once
            self._emit(
                ev.Notice(
                    level="info",
                    message=f"profile of #{b.best_attempt} (branch stalled) skipped: {late}",
                    branch_id=bid,
                )
            )
            return ""
        return "branch stalled"

    def _last_profiled_best(self) -> int | None:
        """The latest attempt profiled as the start or a new best (profiled or pending)."""
        s = self._state
        taken = [
            m
            for m, p in s.profiles.items()
            if p.get("reason") in PROFILED_AS_BEST and m in s.attempts
        ]
        taken += [m for m in self._profiling_best if m in s.attempts]
        return max(taken, default=None)

    @contextlib.asynccontextmanager
    async def _profile_gpu(self, exclusive: bool) -> AsyncIterator[None]:
        """The GPU for a profile's phase. Pipelined workers ask the GPU's arbiter per
        stage, so the arbiter alone keeps them off; serial workers do not ask it, so an
        engine slot is taken as well."""
        hold = self._runner.gpu_alone() if exclusive else self._runner.gpu_shared()
        if self._pipelined:
            async with hold:
                yield
        else:
            async with self._slots(), self._runner.gpu_alone():
                yield

    def _target(self, bid: str, n: int, why: str) -> int:
        """The attempt profiled (n, or the stalled branch's best), marked as taken."""
        target = n if why != "branch stalled" else self._state.branches[bid].best_attempt
        assert target is not None
        self._profiled.add(target)
        if why in PROFILED_AS_BEST:
            self._profiling_best.add(target)
        return target

    def _beside(self, bid: str, n: int, why: str) -> None:
        """Profile while the branch goes on: its verifications and the profile share the
        GPU through the arbiter (the profile holds it alone only while ncu replays). The
        run's end waits for the profiles in flight (a forced stop cancels them)."""
        target = self._target(bid, n, why)
        task = asyncio.ensure_future(self._profile_logged(bid, target, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _profile_logged(self, bid: str, target: int, why: str) -> None:
        try:
            await self._profile(bid, target, why, marked=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an engine bug in one profile: said, the run goes on
            self._emit(
                ev.Notice(
                    level="error",
                    message=f"profile of #{target}: internal error: {type(exc).__name__}: "
                    f"{one_line(exc)}",
                    branch_id=bid,
                )
            )

    async def _profile(self, bid: str, n: int, why: str, *, marked: bool = False) -> None:
        from kernelladder.verifier.host.profile import profile_candidate_async

        target = n if marked else self._target(bid, n, why)
        outcome = await profile_candidate_async(
            self._op_wire,
            self._source(target),
            self._run_dir / "profiles",
            str(target),
            timeout_s=self._timeout_s,
            shared=lambda: self._profile_gpu(exclusive=False),
            exclusive=lambda: self._profile_gpu(exclusive=True),
            on_stage=lambda phase: self._emit(
                ev.AttemptProgress(
                    attempt=target, gate="profile", message=PROFILE_PHASES.get(phase, phase)
                )
            ),
        )
        if outcome.status == "unavailable":
            self._on = False  # said once; the run goes on without profiles
            self._emit(ev.Notice(level="warning", message=f"profiling off: {outcome.reason}"))
        report = ""
        if outcome.report:
            try:
                report = str(Path(outcome.report).relative_to(self._run_dir))
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
                gpu_s=outcome.gpu_s,
                wall_s=outcome.wall_s,
                shared_s=outcome.shared_s,
            )
        )

    async def _decided(self) -> None:
        """_decide, its line said (a warning) when profiling is off."""
        line = await self._decide()
        if line:
            self._emit(ev.Notice(level="warning", message=line))

    async def _decide(self) -> str:
        """Decide once whether this run profiles; the line saying why not, if not. Only
        `ncu --version` here (off the start's path): the first profile says whether the
        counters are readable, and a run whose counters are not turns profiling off."""
        if self._mode == "off":
            return ""
        if not self._device().startswith("cuda"):
            return ""
        if self._remote:
            return "profiling off: Nsight Compute runs with the local runner only"
        from kernelladder.verifier.host.profile import availability

        ok, line = await asyncio.to_thread(availability, None, 60.0, False)
        self._on = ok
        return "" if ok else f"profiling off: {line}"
