"""A re-measure asks for a fresh worker (VerifyRequest.fresh_worker): the client starts a
new worker process for it, and the next ordinary request reuses that one. The real
worker on the CPU (Triton's interpreter); the speed gate is skipped here (no GPU)."""

from __future__ import annotations

import asyncio

from helpers import CHEATS

from kernelladder.engine.protocols import VerifyRequest
from kernelladder.verifier.host.client import LocalTransport, WorkerClient

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()


def test_fresh_worker_starts_a_new_worker_for_that_request_only():
    async def go() -> list[tuple[str, int, int | None]]:
        client = WorkerClient(lambda: LocalTransport("cpu"))
        seen = []
        try:
            for fresh in (False, True, False):
                request = VerifyRequest(
                    op="rmsnorm", source=HONEST, device="cpu", fresh_worker=fresh,
                    paired_rounds=15, pair_every_shape=fresh,
                )  # fmt: skip
                verdict = await client.verify(request, timeout_s=180)
                pid = client._transport.pid if client._transport is not None else None
                seen.append((verdict.verdict, client.workers_started, pid))
        finally:
            await client.close()
        return seen

    seen = asyncio.run(go())
    assert [s[0] for s in seen] == ["pass", "pass", "pass"]
    assert [s[1] for s in seen] == [1, 2, 2]
    assert seen[0][2] != seen[1][2] and seen[1][2] == seen[2][2]


def test_the_local_runner_starts_the_re_measures_worker_ahead_and_keeps_it_for_them():
    """prepare_fresh_worker (the engine calls it while the last attempts are verified)
    starts a worker beside the pool's; the fresh request and the re-measures after it
    run there, the pool's worker is neither replaced nor used by them."""
    from kernelladder.engine.runners.local import LocalRunner

    async def go():
        runner = LocalRunner(device="cpu", slots=1)
        await runner.start()
        try:
            pool_client = runner._pool.clients[0]
            runner.prepare_fresh_worker()
            await runner._fresh_start  # started before it is asked for
            spare = runner._fresh
            slots, verdicts = [], []
            for fresh in (True, False):
                request = VerifyRequest(
                    op="rmsnorm", source=HONEST, device="cpu", fresh_worker=fresh,
                    paired_rounds=15, pair_every_shape=True, timeout_s=180,
                )  # fmt: skip
                verdict = await runner.verify(request, on_slot=slots.append)
                verdicts.append(verdict.verdict)
            return (
                verdicts, slots, pool_client.workers_started, spare.workers_started,
                runner._fresh is spare,
            )  # fmt: skip
        finally:
            await runner.close()

    verdicts, slots, pool_started, spare_started, kept = asyncio.run(go())
    assert verdicts == ["pass", "pass"]
    assert slots == ["cpu:0/fresh", "cpu:0/fresh"]
    assert (pool_started, spare_started, kept) == (1, 1, True)


def test_a_prepare_request_is_answered_and_the_worker_then_verifies():
    """WorkerClient.prepare: the worker answers "prepared" (on the CPU nothing is
    compiled: torch.compile is no baseline there) or, for an op it cannot load, the
    reason; either way the same worker verifies the next candidate."""

    async def go():
        client = WorkerClient(lambda: LocalTransport("cpu"))
        try:
            ok = await client.prepare("rmsnorm", "cpu")
            bad = await client.prepare("no-such-op", "cpu")
            verdict = await client.verify(
                VerifyRequest(op="rmsnorm", source=HONEST, device="cpu"), timeout_s=180
            )
            return ok, bad, verdict.verdict, client.workers_started
        finally:
            await client.close()

    ok, bad, verdict, started = asyncio.run(go())
    assert ok == {"seconds": 0.0}
    assert "no-such-op" in bad["error"]
    assert (verdict, started) == ("pass", 1)
