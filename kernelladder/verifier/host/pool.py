"""Local workers pooled: one per GPU (or `size` on the CPU), or `per_gpu` of them sharing
each GPU through its GpuArbiter, and the keeping of their workers between runs: a pool
with `keep_s` > 0 takes workers kept from an earlier run of the same recipe as it starts
and hands its idle ones to the keeper (keeper.py) as it closes.

Standard library only, like client.py.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import os
from collections.abc import Iterable
from typing import Any

from kernelladder.verifier.contract.verdict import Verdict
from kernelladder.verifier.host import keeper
from kernelladder.verifier.host.client import ProgressFn, WorkerClient
from kernelladder.verifier.host.gpu_arbiter import GpuArbiter
from kernelladder.verifier.host.local_transport import LocalTransport

# workers started before their run's pool exists (start_ahead), claimed by its start()
_AHEAD: list[LocalTransport] = []


def start_ahead(
    device: str,
    gpus: int,
    per_gpu: int,
    keep_s: float = 0.0,
    **transport_options: Any,
) -> list[LocalTransport]:
    """Start the workers a LocalPool(device, gpus, per_gpu=..., keep_s=...) will want, now,
    before any event loop runs: taken from the keeper where kept ones of their recipe
    are (keep_s > 0), else spawned. The caller goes on with its own start (the CLI
    imports torch and loads the op meanwhile); the pool's start() claims them by recipe,
    and those it does not claim are killed (discard_unclaimed, also at exit)."""
    gpu_ids = list(range(max(1, gpus))) if device == "cuda" else [None]
    transports = [
        LocalTransport(device, cuda_device=gpu, **transport_options)
        for _ in range(max(1, per_gpu))
        for gpu in gpu_ids
    ]
    if keep_s > 0:
        with contextlib.suppress(Exception):  # no keeper to be had: they are spawned below
            _adopt_kept(transports)
    if not _AHEAD:
        atexit.register(discard_unclaimed)
    for t in transports:
        try:
            t.spawn_ahead()
        except OSError:
            continue  # the pool starts this one itself, and says why if it cannot
        _AHEAD.append(t)
    return transports


def _adopt_kept(transports: list[LocalTransport]) -> None:
    """Each transport that a kept worker of its recipe is there for adopts one (keeper.py;
    the warmest first), grouped by recipe: one take per recipe. Raises when no keeper
    can be had (the callers then start their own)."""
    if not transports or not os.path.exists(keeper.socket_path()):
        return
    groups: dict[str, list[LocalTransport]] = {}
    for t in transports:
        groups.setdefault(t.recipe_key(), []).append(t)
    for key, members in groups.items():
        for t, (worker, fds) in zip(members, keeper.take(key, len(members)), strict=False):
            t.adopt(worker, fds)


def _claim_ahead(clients: list[WorkerClient]) -> None:
    """Each client that a worker started ahead of its recipe is there for starts from it."""
    if not _AHEAD:
        return
    ahead = [(t.recipe_key(), t) for t in _AHEAD]  # each recipe hashed once
    for client in clients:
        if client.alive or client._taken is not None or client._ahead is not None:
            continue
        probe = client._factory()
        if not isinstance(probe, LocalTransport):
            continue
        key = probe.recipe_key()
        match = next((pair for pair in ahead if pair[0] == key), None)
        if match is not None:
            ahead.remove(match)
            _AHEAD.remove(match[1])
            client.start_from(match[1])
    discard_unclaimed()


def discard_unclaimed() -> None:
    """Workers started ahead that no pool claimed (another device or GPU count than the
    run's, a run that failed to start) go now."""
    while _AHEAD:
        with contextlib.suppress(Exception):
            _AHEAD.pop().discard_ahead()


async def take_kept_workers(clients: list[WorkerClient]) -> None:
    """Before the clients start: each that a kept worker of its recipe is there for
    adopts one (keeper.py; the warmest first); the others start theirs as usual."""
    probes = [(c, c._factory()) for c in clients if c._taken is None and not c.alive]
    probes = [(c, t) for c, t in probes if isinstance(t, LocalTransport)]
    with contextlib.suppress(Exception):  # no keeper to be had: the rest start their own
        await asyncio.to_thread(_adopt_kept, [t for _, t in probes])
    for client, transport in probes:  # those adopted before a failure are used all the same
        if transport.kept_ahead:
            client.adopt(transport)


async def keep_idle_workers(clients: list[WorkerClient], keep_s: float) -> list[int]:
    """Hand each client's idle, healthy local worker to the keeper (started if none
    runs) for `keep_s` seconds instead of shutting it down; the pids kept. The keeper
    keeps at most as many of one recipe as these clients have. The rest are left to
    close(), which shuts them down as before."""
    live = [c for c in clients if c.keepable()]
    if keep_s <= 0 or not live:
        return []

    def facts_now() -> list[dict[str, Any]]:
        return [c._transport.keeper_facts() for c in live]  # type: ignore[union-attr]

    try:
        facts = await asyncio.to_thread(facts_now)
    except Exception:
        return []
    caps = collections.Counter(f["recipe"] for f in facts)
    pids = await asyncio.gather(
        *(c.hand_over(keep_s, caps[f["recipe"]], f) for c, f in zip(live, facts, strict=True)),
        return_exceptions=True,
    )
    return [p for p in pids if isinstance(p, int)]


class LocalPool:
    """Local workers: one per GPU (or `size` CPU workers), or `per_gpu` of them sharing
    each GPU through its GpuArbiter (a pipelined verification compiles ahead in one
    while another times); verify() uses a free one. With `keep_s` > 0, start() takes
    workers kept from an earlier run of the same recipe and close() hands its idle ones
    to the keeper for `keep_s` seconds (keeper.py)."""

    def __init__(
        self,
        device: str = "cpu",
        size: int | None = None,
        *,
        secrets: Iterable[str] | None = None,
        per_gpu: int = 1,
        keep_s: float = 0.0,
        **transport_options: Any,
    ):
        if size is None:
            size = 1
        self.device = device
        self.keep_s = max(0.0, float(keep_s))
        self.taken: list[int] = []  # pids of the workers start() took from the keeper
        self.kept: list[int] = []  # pids of the workers close() handed to it
        per_gpu = max(1, int(per_gpu))
        gpus = list(range(size)) if device == "cuda" else [None] * size
        # one arbiter per GPU, shared by its workers (the CPU workers share one)
        if device == "cuda":
            self.arbiters = [GpuArbiter(f"cuda:{i}") for i in range(size)]
        else:
            self.arbiters = [GpuArbiter(f"{device}:0")]
        self.clients: list[WorkerClient] = []
        self.slot_names: list[str] = []
        for j in range(per_gpu):  # interleaved: the first free slots spread over the GPUs
            for i, gpu in enumerate(gpus):
                self.clients.append(
                    WorkerClient(
                        lambda gpu=gpu: LocalTransport(
                            device, cuda_device=gpu, **transport_options
                        ),
                        secrets=secrets,
                        arbiter=self.arbiters[i % len(self.arbiters)],
                    )
                )
                self.slot_names.append(f"{device}:{i}" + (f"/{j}" if per_gpu > 1 else ""))
        self._free: asyncio.Queue[WorkerClient] | None = None

    @property
    def slots(self) -> int:
        return len(self.clients)

    def _queue(self) -> asyncio.Queue[WorkerClient]:
        if self._free is None:
            self._free = asyncio.Queue()
            for client in self.clients:
                self._free.put_nowait(client)
        return self._free

    async def start(self) -> list[dict[str, Any]]:
        """Start every worker now (else they start on first use); their hello lines. Each
        GPU takes the rates kept on disk for it (calibration.py), when fresh."""
        _claim_ahead(self.clients)
        if self.keep_s > 0:
            await take_kept_workers(self.clients)
        hellos = list(await asyncio.gather(*(c.hello() for c in self.clients)))
        self.taken = [c.worker_pid or 0 for c in self.clients if c.kept_from_earlier]
        if self.device == "cuda":
            from kernelladder.verifier.host.calibration import GpuIdentity, driver_version

            driver = driver_version()
            for client, hello in zip(self.clients, hellos, strict=True):
                facts = client.arbiter.facts if client.arbiter is not None else None
                if facts is None or facts.identity is not None or not hello.get("gpu"):
                    continue
                identity = GpuIdentity(str(hello["gpu"]), driver, str(hello.get("torch") or ""))
                facts.calibrate(identity)
        return hellos

    async def verify(
        self, request: Any, on_progress: ProgressFn | None = None, timeout_s: float | None = None
    ) -> Verdict:
        queue = self._queue()
        client = await queue.get()
        try:
            return await client.verify(request, on_progress=on_progress, timeout_s=timeout_s)
        finally:
            queue.put_nowait(client)

    async def close(self) -> None:
        if self.keep_s > 0:
            self.kept += await keep_idle_workers(self.clients, self.keep_s)
        await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)
