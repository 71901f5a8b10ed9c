"""The end of a run: its best re-measured back to back with the fastest baseline in a
fresh worker, recorded as BestConfirmed: which attempts, how many, when one holds."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import VerifyRequest
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import ATTEMPTS_DIR, write_durable
from kernelladder.engine.record.standing_rank import (
    MIN_NOISE,
    best_baseline_name,
    merit_of,
    standing_shapes,
    ties,
)
from kernelladder.engine.record.state import RunState, ranked_passes
from kernelladder.engine.run.lines import one_line, verdict_line
from kernelladder.engine.run.run_part import RunHandles, RunPart
from kernelladder.verifier.contract.verdict import vs_best

CONFIRM_ROUNDS = 15  # back-to-back rounds per shape when the run's best is re-measured
# a shape's rounds stop once its tie is settled (paired_rounds.settled_word: the 15-round
# sign test's word on the same rounds), after at least this many for the median ratio
CONFIRM_MIN_ROUNDS = 5
CONFIRM_LIMIT = 3  # re-measures at the end of a run, at most (best, runner-up, next best)


class BestConfirmation(RunPart):
    def __init__(
        self,
        run: RunHandles,
        *,
        source: Callable[[int], str],
        run_dir: Path,
        cancelled: Callable[[], bool],
        engine_failed: Callable[[], bool],
    ) -> None:
        super().__init__(run)
        self._on = run.options.confirm
        self._source = source  # attempt n's source
        self._run_dir = run_dir  # the re-measure's verdict is kept beside the attempt's
        # the run itself was cancelled, or an engine bug ended it: nothing is re-measured
        self._cancelled = cancelled
        self._engine_failed = engine_failed
        self._prepared = False  # the re-measure's worker asked for ahead
        self._task: asyncio.Future[Any] | None = None

    def prepare(self) -> None:
        """The runner starts the re-measure's fresh worker now, once: after the run's
        first verdict with a speed (it waits idle, timing nothing, so it is as fresh at
        the end; its start -- Python, torch, the CUDA context, torch.compile's first use,
        5-6 s on the H200 -- is then off the end's path, which most runs reach by every
        branch's end rather than by the attempt count), else when the end is near."""
        if self._prepared or not self._on or not self._state.speed_measured:
            return
        if self._cancelled() or self._engine_failed():
            return
        self._prepared = True
        self._runner.prepare_fresh_worker(self._op_wire)

    def stop(self) -> bool:
        """End the re-measure in flight (recorded as a Notice); False when none is."""
        if self._task is None or self._task.done():
            return False
        self._task.cancel()
        return True

    async def at_end(self, reason: str) -> None:
        """Re-measure the run's best (and the runner-up when within noise) in a fresh
        worker, back to back with the fastest baseline at every shape for CONFIRM_ROUNDS
        rounds; record BestConfirmed for each; when one does not hold, the next best is
        re-measured (CONFIRM_LIMIT in all). Skipped, with a Notice, where it cannot run."""
        s = self._state
        if not self._on or self._cancelled() or self._engine_failed():
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
        ranked = _one_per_source(
            s, [n for n in ranked_passes(s) if s.attempts[n].vs_best is not None]
        )
        if not ranked:
            self._emit(
                ev.Notice(
                    level="info",
                    message=f"best #{best.number} not re-measured: no library baseline "
                    "ran to measure it against",
                )
            )
            return
        queue = ranked[:2] if within_noise(s, ranked[0], ranked[1:2]) else ranked[:1]
        rest = ranked[len(queue) :]
        self._task = asyncio.ensure_future(self._confirm_queue(queue, rest))
        try:
            await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._cancelled() or (current is not None and current.cancelling()):
                raise  # the run itself is being cancelled, not only the re-measure
            self._emit(ev.Notice(level="warning", message="re-measuring the best was stopped"))
        finally:
            self._task = None

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
        a = self._state.attempts[n]
        against = best_baseline_name(a.standing_shapes) or "the fastest baseline"
        self._emit(
            ev.Notice(
                level="info",
                message=f"re-measuring #{n} against {against}: {CONFIRM_ROUNDS} rounds back "
                f"to back per shape (fewer, at least {CONFIRM_MIN_ROUNDS}, once a tie is "
                f"settled) in {'a fresh' if fresh else 'the same fresh'} worker",
            )
        )
        request = VerifyRequest(
            op=self._op_wire,
            source=self._source(n),
            device=self._device(),
            min_speedup=self._min_speedup,
            timeout_s=self._timeout_s,
            paired_rounds=CONFIRM_ROUNDS,
            paired_min_rounds=CONFIRM_MIN_ROUNDS,
            pair_every_shape=True,
            fresh_worker=fresh,
        )
        try:
            verdict = await self._runner.verify(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            line = f"#{n} not re-measured: the runner failed: {one_line(exc)}"
            self._emit(ev.Notice(level="warning", message=line))
            return None
        with contextlib.suppress(OSError):
            text = json.dumps(verdict.to_dict(), indent=1, sort_keys=True)
            write_durable(self._run_dir / ATTEMPTS_DIR / f"{n}.confirm.json", text.encode())
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
        # the most rounds a shape ran (a tie settled stops sooner; each shape's own count
        # is in its row)
        ran = [r["rounds"] for r in shapes.values() if isinstance(r.get("rounds"), int)]
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
                rounds=max(ran, default=CONFIRM_ROUNDS),
                detail=why,
            )
        )
        return not why


def _one_per_source(state: RunState, ranked: list[int]) -> list[int]:
    """Each kernel once, at its best-ranked attempt: a source verified twice (a proposer
    may hand in a kernel it wrote before) is not its own runner-up."""
    seen: set[str] = set()
    out = []
    for n in ranked:
        digest = state.attempts[n].source_hash
        if digest and digest in seen:
            continue
        seen.add(digest)
        out.append(n)
    return out


def within_noise(state: RunState, first: int, others: list[int]) -> bool:
    """Is the runner-up (others[0]) as good as the best within the noise?"""
    if not others:
        return False
    return ties(merit_of(state.attempts[first]), merit_of(state.attempts[others[0]]))
