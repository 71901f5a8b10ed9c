"""One attempt through the runner: a slot, the verification with retries when the
runner is lost, the progress lines kept, the verdict recorded with what it improved."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from kernelladder.engine.protocols import RunnerLost, VerifyRequest
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.standing_rank import standing_shapes
from kernelladder.engine.record.state import AttemptStatus, improvement
from kernelladder.engine.run.lines import one_line, verdict_line
from kernelladder.engine.run.proposal_inputs import ProposalInputs
from kernelladder.engine.run.rules import branch_exit
from kernelladder.engine.run.run_part import RunHandles, RunPart
from kernelladder.verifier.contract.verdict import Verdict, standing, standing_text, vs_best

MAX_RUNNER_RETRIES = 2  # a lost runner re-runs the attempt this many times, then the run stops
PROGRESS_PER_GATE = 4  # progress events recorded per gate of an attempt; the rest are dropped
PROGRESS_INTERVAL_S = 0.5
# A search attempt's back-to-back rounds at a shape stop once their word is settled: a
# tie as soon as one round was not won and one not lost (paired_rounds.settled_word: the
# word all PAIRED_ROUNDS would give, so the same error rate); "faster" and "slower" still
# take every round. At least this many, so the candidate's median pools a few rounds.
SEARCH_MIN_ROUNDS = 3

# What a branch task is doing, for shutdown (verifications finish, the rest is cancelled).
IDLE, PROPOSING, GATE, QUEUED, VERIFYING, DONE = (
    "idle", "proposing", "gate", "queued", "verifying", "done",
)  # fmt: skip


class AttemptVerification(RunPart):
    def __init__(
        self,
        run: RunHandles,
        *,
        request_stop: Callable[..., None],
        slots: Callable[[], asyncio.Semaphore],
        inputs: ProposalInputs,
        write_verdict: Callable[[int, dict[str, Any]], str],
        set_phase: Callable[[str, str], None],
        closed: Callable[[], bool],
        retry_backoff_s: float,
    ) -> None:
        super().__init__(run)
        self._request_stop = request_stop  # Run's: (rule, by=, detail=)
        self._pipelined = run.options.pipelined
        self._early_stop = run.options.early_stop
        self._slots = slots  # the engine's verification slots, made once the runner started
        self._inputs = inputs  # verdicts read back, and kept as they are recorded
        self._write_verdict = write_verdict  # into the run directory; returns its hash
        self._set_phase = set_phase  # what the branch task is doing (IDLE and the rest)
        self._closed = closed  # the run has ended: late runner reports are dropped
        self.retry_backoff_s = retry_backoff_s

    async def verify(self, bid: str, n: int, source: str) -> Verdict | None:
        """Attempt n of branch bid verified and recorded; None when it was not (the run
        is stopping, or the runner was lost too often and the run stops)."""
        self._set_phase(bid, QUEUED)
        async with self._slots():
            if self._state.stopping or self._state.finished:
                return None
            self._set_phase(bid, VERIFYING)
            request = VerifyRequest(
                op=self._op_wire,
                source=source,
                device=self._device(),
                min_speedup=self._min_speedup,
                timeout_s=self._timeout_s,
                pipeline=self._pipelined,
                early_stop=self._early_stop_for(bid),
                paired_min_rounds=SEARCH_MIN_ROUNDS,
            )
            retry = 0
            while True:
                started = self._start_attempt(bid, n, retry)
                # a runner that names its slot emits AttemptStarted when it takes one
                on_slot = started if self._runner.reports_slot else None
                if on_slot is None:
                    started("")
                try:
                    verdict = await self._runner.verify(
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
                    return None
                retry += 1
                self._emit(ev.AttemptRetried(attempt=n, reason=why))
                await asyncio.sleep(self.retry_backoff_s * retry)
        self._record_verdict(bid, n, verdict)
        return verdict

    def _early_stop_for(self, bid: str) -> dict[str, Any] | None:
        """What a new attempt of this branch must beat for its timing to go on past the
        first look: the branch's head (its best, else the attempt it began from), with
        that attempt's time per shape; None when off, on the CPU or with nothing timed."""
        if not self._early_stop or not self._state.speed_measured:
            return None
        head = self._state.branches[bid].head
        verdict = self._inputs.verdict(head) if head is not None else None  # read back on resume
        if not verdict or verdict.get("verdict") != "pass" or verdict.get("early_stop"):
            return None
        timed = [
            t
            for t in verdict.get("timings") or ()
            if isinstance(t.get("candidate_ms"), int | float) and t["candidate_ms"] > 0
        ]
        if not timed:
            return None
        return {
            "attempt": head,
            "timings": {str(t.get("label")): float(t["candidate_ms"]) for t in timed},
            # per shape: a launch-bound tiny shape's spread must not widen the large ones'
            "noise": {str(t.get("label")): float(t.get("noise") or 0.0) for t in timed},
        }

    def _start_attempt(self, bid: str, n: int, retry: int) -> Callable[[str], None]:
        """AttemptStarted for one try, emitted once: by the runner's on_slot when it has
        taken a slot (so the event says where it runs), else before the outcome."""
        done = [False]

        def started(slot: str) -> None:
            if done[0] or self._closed():
                return
            done[0] = True
            self._emit(
                ev.AttemptStarted(
                    attempt=n, branch_id=bid, runner=self._runner.name, slot=slot, retry=retry
                )
            )

        return started

    def _record_verdict(self, bid: str, n: int, verdict: Verdict) -> None:
        b = self._state.branches[bid]
        full = verdict.with_dead_ends(tuple(b.dead_ends)).to_dict()
        verdict_hash = self._write_verdict(n, full)
        self._inputs.keep_verdict(n, full)
        measured = self._state.speed_measured
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
                speedup=verdict.speedup if self._state.speed_measured else None,
                floor_fraction=verdict.floor_fraction if self._state.speed_measured else None,
                noise=verdict.noise if self._state.speed_measured else None,
                summary=verdict_line(verdict, versus),
                verdict_hash=verdict_hash,
                elapsed_s=float(verdict.elapsed_s or 0.0),
                standing=versus,
                vs_best=None if versus_best is None else round(versus_best, 6),
                standing_shapes=shapes,
                early_stop=_early_stop_attempt(verdict) if measured and verdict.passed else None,
            )
        )
        better_branch, better_run = improvement(self._state, n)
        if better_branch:
            self._emit(
                ev.BestImproved(
                    attempt=n,
                    branch_id=bid,
                    speedup=self._state.attempts[n].speedup,
                    previous=b.best_speedup if b.best_speedup is not None else b.baseline_speedup,
                    overall=better_run,
                    vs_best=self._state.attempts[n].vs_best,
                )
            )
        if not b.closed:
            hit = branch_exit(self._state, b)
            if hit is not None:
                self._emit(ev.BranchExhausted(branch_id=bid, rule=hit[0], detail=hit[1]))

    def _progress_sink(self, n: int) -> Callable[[str, str], None]:
        """on_progress for one attempt: the first lines of each gate are recorded, at
        most PROGRESS_PER_GATE of them and one per PROGRESS_INTERVAL_S; the rest dropped."""
        loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()  # the run's
        seen: dict[str, int] = {}
        last = [0.0]

        def record(gate: str, message: str) -> None:
            if self._closed() or self._state.attempts.get(n) is None:
                return
            if self._state.attempts[n].status != AttemptStatus.RUNNING:
                return
            count = seen.get(gate, 0)
            now = time.monotonic()
            if count >= PROGRESS_PER_GATE or (count and now - last[0] < PROGRESS_INTERVAL_S):
                return
            seen[gate] = count + 1
            last[0] = now
            self._emit(ev.AttemptProgress(attempt=n, gate=str(gate), message=one_line(message)))

        def on_progress(gate: str, message: str) -> None:
            if threading.get_ident() == loop_thread:
                record(gate, message)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(record, gate, message)

        return on_progress


def _early_stop_attempt(verdict: Any) -> int | None:
    """The attempt a verdict whose timing stopped early was not faster than."""
    stop = getattr(verdict, "early_stop", None) or {}
    attempt = stop.get("attempt")
    return int(attempt) if isinstance(attempt, int) else None
