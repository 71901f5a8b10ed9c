"""One worker's GPU access, stage by stage, through the arbiter of the GPU it shares.

A pipelined verification's worker says which stage it enters and the access it wants
("shared", "exclusive" or "none"); the caller waits until the arbiter grants it, answers
"go", and gives the access back when the next stage begins or the request ends.
torch.compile's baselines of an op are compiled with the GPU alone by the first worker
of that GPU that asks, and beside correctness runs by the others once it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from kernelladder.verifier.contract.protocol import encode
from kernelladder.verifier.host.gpu_arbiter import EXCLUSIVE, SHARED, GpuArbiter, GpuFacts
from kernelladder.verifier.host.transport import within

ProgressFn = Callable[[str, str], None]


class StageGrants:
    """The GPU access of one worker's requests; with no arbiter every stage is granted
    at once."""

    def __init__(self, arbiter: GpuArbiter | None) -> None:
        self.arbiter = arbiter
        self.op_now: Any = None  # the op of the pipelined request in flight
        # the op whose torch.compile baselines this worker compiles with the GPU alone now
        self._baselines_alone: Any = None

    async def grant(
        self,
        transport: Any,
        req_id: str,
        stage: str,
        gpu: str,
        held: list[str],
        on_progress: ProgressFn | None,
        op: Any = None,
    ) -> float | None:
        """Give the worker the GPU for its next stage: what it held goes back, the new
        access is waited for (seconds waited returned), then "go". None: the worker is
        gone. A stage that needs no GPU is only reported. torch.compile's baselines of
        an op (stage "baselines", asked with the GPU alone: inductor benchmarks configs
        as it compiles) are compiled beside other correctness runs once one worker of
        this GPU compiled them alone in this process: its compile filled the shared
        compile caches, so the others' load what it chose and benchmark nothing (one
        that asks while the first compiles waits for it, then compiles beside the rest)."""
        self.baselines_done()  # a new stage: the baselines' compile, if any, is over
        self.release(held)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        arbiter = self.arbiter
        op = op if op is not None else self.op_now
        if stage == "baselines" and gpu == EXCLUSIVE and arbiter is not None and op is not None:
            gpu = await self._baselines_access(arbiter, op, on_progress)
        if gpu in (SHARED, EXCLUSIVE):
            if arbiter is not None and arbiter.busy_for(gpu) and on_progress is not None:
                alone = "to itself" if gpu == EXCLUSIVE else "beside other correctness runs"
                with contextlib.suppress(Exception):
                    on_progress(stage, f"waiting for the GPU ({alone})")
            if arbiter is not None:
                await arbiter.acquire(gpu)
            held.append(gpu)
            go: dict[str, Any] = {"type": "go", "id": req_id}
            if gpu == EXCLUSIVE and self.op_now is not None and arbiter is not None:
                # what other workers measured since the request was sent (the first
                # verdicts of a run come while the others wait to time their first)
                go["known"] = arbiter.facts.known(self.op_now)
            try:
                transport.stdin.write(encode(go))
                await within(transport.stdin.drain(), 30)
            except Exception:
                return None
        return loop.time() - asked

    async def _baselines_access(
        self, arbiter: GpuArbiter, op: Any, on_progress: ProgressFn | None
    ) -> str:
        """How this worker may compile `op`'s baselines: alone when it is the GPU's first
        (the others wait for it), else beside correctness runs."""
        key = GpuFacts.op_key(op)
        while (done := arbiter.baselines.get(key)) is None or not done.is_set():
            if done is None:
                arbiter.baselines[key] = asyncio.Event()
                self._baselines_alone = op
                return EXCLUSIVE
            if on_progress is not None:
                with contextlib.suppress(Exception):
                    on_progress("baselines", "waiting for another worker's compile of them")
            await done.wait()  # done, or its worker gone: then one of those waiting is first
        return SHARED

    def baselines_done(self, compiled: bool = True) -> None:
        """The baselines this worker compiled with the GPU alone are in the caches now
        (`compiled` False: its worker is gone, they may not be)."""
        op, self._baselines_alone = self._baselines_alone, None
        if op is None or self.arbiter is None:
            return
        key = GpuFacts.op_key(op)
        done = (
            self.arbiter.baselines.get(key) if compiled else self.arbiter.baselines.pop(key, None)
        )
        if done is not None:
            done.set()  # kept: compiled; gone: those waiting find no compile and one begins

    def release(self, held: list[str]) -> None:
        """Give back the GPU access a request holds."""
        while held:
            mode = held.pop()
            if self.arbiter is not None:
                self.arbiter.release(mode)
