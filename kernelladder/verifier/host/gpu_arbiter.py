"""Who may use one GPU now, among the workers that share it (the caller's side).

A pipelined verification asks for the GPU per stage: correctness runs beside other
workers' correctness ("shared"), timing has the GPU to itself ("exclusive"). Timings
are granted in order of asking, and before any correctness that waits: while a timing
holds the GPU or waits for it, correctness requests gather, and once none is left they
are granted together, so the correctness of several workers runs at once instead of
one between each two timings. Neither starves: a worker asks for its timing only
after its correctness, so at most one timing per worker is ever ahead of a waiting
correctness. Standard library only (the engine imports it through the client).
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from typing import Any

SHARED, EXCLUSIVE = "shared", "exclusive"
FACTS_FRESH_S = 120.0  # as gates.CACHE_REFRESH_S: older facts are measured again


class GpuArbiter:
    """One GPU's use, in asyncio (one event loop); release() needs no await."""

    def __init__(self, name: str = "gpu") -> None:
        self.name = name
        self._shared = 0
        self._exclusive = False
        self._timings: collections.deque[asyncio.Future[None]] = collections.deque()
        self._waiting_shared: list[asyncio.Future[None]] = []
        # what one worker measured on this GPU, for the others (GpuFacts)
        self.facts = GpuFacts()
        # ops' torch.compile baselines compiled by a worker with this GPU alone (the others
        # then compile theirs beside correctness runs: StageGrants._baselines_access): an op's
        # event is set once they are; unset, a worker compiles them now; an op absent, none
        # has (or the one that began went before it was done)
        self.baselines: dict[str, asyncio.Event] = {}

    def baselines_compiled(self) -> set[str]:
        """The ops whose baselines a worker compiled with this GPU alone."""
        return {key for key, done in self.baselines.items() if done.is_set()}

    @property
    def holders(self) -> tuple[int, bool]:
        """(shared holders, whether one holds it exclusively)."""
        return self._shared, self._exclusive

    def _can(self, mode: str) -> bool:
        """Whether `mode` could be granted now to a request that waits for nothing else."""
        if self._exclusive:
            return False
        if mode == SHARED:
            return not self._timings  # a waiting timing goes first
        return self._shared == 0

    def _take(self, mode: str) -> None:
        if mode == SHARED:
            self._shared += 1
        else:
            self._exclusive = True

    def busy_for(self, mode: str) -> bool:
        """Whether asking for `mode` now would wait."""
        if mode == EXCLUSIVE and self._timings:
            return True
        return not self._can(mode)

    async def acquire(self, mode: str) -> None:
        if mode not in (SHARED, EXCLUSIVE):
            raise ValueError(f"unknown GPU access {mode!r}")
        if not self.busy_for(mode):
            self._take(mode)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if mode == SHARED:
            self._waiting_shared.append(future)
        else:
            self._timings.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(mode)  # granted as the caller was cancelled
            else:
                self._forget(future)
                self._grant()
            raise

    def _forget(self, future: asyncio.Future[None]) -> None:
        self._timings = collections.deque(f for f in self._timings if f is not future)
        self._waiting_shared = [f for f in self._waiting_shared if f is not future]

    def release(self, mode: str) -> None:
        if mode == SHARED:
            self._shared = max(0, self._shared - 1)
        else:
            self._exclusive = False
        self._grant()

    def _grant(self) -> None:
        if self._exclusive:
            return
        while self._timings and self._timings[0].done():  # cancelled while waiting
            self._timings.popleft()
        if self._timings:
            if self._shared == 0:
                self._take(EXCLUSIVE)
                self._timings.popleft().set_result(None)
            return  # correctness waits until no timing does
        waiting, self._waiting_shared = self._waiting_shared, []
        for future in waiting:
            if not future.done():
                self._take(SHARED)
                future.set_result(None)


class GpuFacts:
    """Measurements of one GPU that do not depend on the candidate (its copy and matmul
    rates; per op and shape the reference's time and the library baselines'), learned
    from one worker's verdicts and handed to the others in their requests, so a worker
    that joins the pipeline does not hold the GPU to measure them again. Each worker
    still refreshes them on its own schedule (gates.CACHE_REFRESH_S), from their age."""

    def __init__(self) -> None:
        self.rates: dict[str, float] | None = None
        self._shapes: dict[str, dict[str, dict[str, Any]]] = {}
        # the rates kept on disk per (GPU, driver, torch): calibration.py
        self.identity: Any = None  # calibration.GpuIdentity once the workers said hello
        self.rates_kept = False  # read from the file, or written to it

    def calibrate(self, identity: Any) -> bool:
        """Take the rates kept for this GPU, driver and torch when fresh; True if taken."""
        from kernelladder.verifier.host import calibration

        self.identity = identity
        kept = calibration.read_rates(identity)
        if kept:
            self.rates, self.rates_kept = kept, True
        return bool(kept)

    def rates_only(self) -> dict[str, Any] | None:
        """A request's "known" with the rates only (a worker that must time everything
        itself, e.g. the end's re-measure, need not measure the GPU's rates again)."""
        return {"rates": dict(self.rates), "shapes": {}} if self.rates else None

    @staticmethod
    def op_key(op: Any) -> str:
        return json.dumps(op, sort_keys=True) if not isinstance(op, str) else op

    def known(self, op: Any) -> dict[str, Any]:
        """The request's "known": rates and, per shape, times with their age."""
        now = time.monotonic()
        shapes = {
            label: {
                "reference_ms": fact["reference_ms"],
                "baselines_ms": dict(fact["baselines_ms"]),
                "age_s": now - fact["at"],
            }
            for label, fact in self._shapes.get(self.op_key(op), {}).items()
            if now - fact["at"] < FACTS_FRESH_S
        }
        return {"rates": dict(self.rates) if self.rates else None, "shapes": shapes}

    def learn_rates(self, verdict: Any) -> None:
        """Take the rates a verdict of this GPU measured, and keep them on disk once."""
        if not getattr(verdict, "passed", False) or not verdict.timings:
            return
        rates = (verdict.environment or {}).get("rates")
        if isinstance(rates, dict) and rates:
            self.rates = {k: float(v) for k, v in rates.items() if isinstance(v, int | float)}
            if self.identity is not None and not self.rates_kept:
                from kernelladder.verifier.host import calibration

                self.rates_kept = calibration.write_rates(self.identity, self.rates)

    def learn(self, op: Any, verdict: Any) -> None:
        """Take the rates and per-shape times from a passing verdict of this GPU."""
        if not getattr(verdict, "passed", False) or not verdict.timings:
            return
        self.learn_rates(verdict)
        shapes = self._shapes.setdefault(self.op_key(op), {})
        now = time.monotonic()
        for t in verdict.timings:
            old = shapes.get(t.label)
            if t.reference_ms and (old is None or now - old["at"] >= FACTS_FRESH_S):
                shapes[t.label] = {
                    "reference_ms": float(t.reference_ms),
                    "baselines_ms": {k: float(v) for k, v in t.baselines_ms.items()},
                    "at": now,
                }
