"""A cancelled verification (a stopped run) kills the worker that was running the
candidate, before the client takes the next one: through a real worker process and the
real Triton interpreter."""

from __future__ import annotations

import asyncio
import os

import pytest
from helpers import ROOT

from kernelladder.verifier.host.client import LocalTransport, WorkerClient

CHEATS = ROOT / "tests" / "cheats"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_cancelled_verify_kills_its_worker_and_the_next_one_runs_fresh():
    transports: list[LocalTransport] = []

    def factory() -> LocalTransport:
        transports.append(LocalTransport("cpu"))
        return transports[-1]

    client = WorkerClient(factory)
    try:
        started = asyncio.Event()
        hang = {"op": "rmsnorm", "source": (CHEATS / "hang.py").read_text(), "device": "cpu"}
        task = asyncio.ensure_future(
            client.verify(hang, on_progress=lambda g, m: started.set(), timeout_s=120)
        )
        await asyncio.wait_for(started.wait(), 120)
        pid = transports[0].pid
        assert pid is not None and alive(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not alive(pid)  # killed before the cancellation reached the caller

        honest = {
            "op": "rmsnorm",
            "source": (CHEATS / "honest_rmsnorm.py").read_text(),
            "device": "cpu",
        }
        verdict = await client.verify(honest, timeout_s=120)
        assert verdict.verdict == "pass", verdict.gates
        assert len(transports) == 2  # a fresh worker, not the one left hanging
    finally:
        await client.close()
