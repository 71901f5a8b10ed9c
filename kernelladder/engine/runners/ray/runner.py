"""Verification on a Ray cluster: one actor per GPU (or N CPU actors), each owning
persistent verifier workers on its node: one, or per_gpu of them sharing its GPU through
the actor's GpuArbiter as the local pool's do (a pipelined run's default), each worker a
slot of the runner's.

    runner = RayRunner(address="auto", device="cuda")   # or "local", "HOST:PORT", "ray://..."
    await runner.start()           # connect, ship the package, start one actor per slot
    verdict = await runner.verify(request, on_progress)
    await runner.close()

Each actor drives the verifier's own WorkerClient over a LocalTransport on its node, so
the worker speaks the same JSON-lines protocol, in the same scrubbed sandbox, as the
local runner's. The package reaches the nodes through Ray's runtime environment
(`py_modules`), not the SSH runner's SFTP sync. An actor or node lost during an attempt
raises RunnerLost (the engine records AttemptRetried and runs the attempt on another
slot); the lost slot leaves the pool with a notice; when none is left the run stops with
the reason.

Nothing here imports ray at module level: `import ray` happens in start(), so only a run
that chose the Ray runner needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.protocols import ProgressFn, RunnerLost, VerifyRequest
from kernelladder.engine.runners.free_slots import FreeSlots, SlotPoolRunner
from kernelladder.engine.runners.ray.actor import VerifierActor
from kernelladder.engine.runners.ray.cluster import (
    NAMESPACE,
    RayUnavailable,
    cluster_line,
    cluster_nodes,
    connect,
    error_line,
)
from kernelladder.verifier.contract.verdict import Verdict

ACTOR_START_TIMEOUT_S = 300.0  # scheduling on a busy cluster + torch import + CUDA context
PROGRESS_POLL_S = 0.5
CALL_MARGIN_S = 120.0  # beyond the candidate's own timeout before an actor counts as hung


@dataclass
class _Slot:
    index: int
    actor: Any
    name: str
    label: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    gone: str | None = None


def _actor_lost_types(ray: Any) -> tuple[type[BaseException], ...]:
    exc = ray.exceptions
    names = (
        "RayActorError",
        "ActorDiedError",
        "ActorUnavailableError",
        "WorkerCrashedError",
        "NodeDiedError",
        "ObjectLostError",
        "OwnerDiedError",
        "RaySystemError",
        "GetTimeoutError",
    )
    return tuple(getattr(exc, n) for n in names if isinstance(getattr(exc, n, None), type))


def runner_name(actors_per_node: list[int], kind: str) -> str:
    """The runner as the header and each AttemptStarted name it: nodes and actors per
    node, e.g. "ray:2 nodes 4+4 GPU" or "ray:1 node 2 CPU"."""
    nodes = len(actors_per_node)
    per_node = "+".join(str(n) for n in actors_per_node)
    return f"ray:{nodes} node{'s' if nodes != 1 else ''} {per_node} {kind}"


class RayRunner(SlotPoolRunner):
    """The engine's Runner over Ray actors: one per GPU of the cluster (device cuda), or
    `slots` CPU actors running the Triton interpreter (device cpu)."""

    reports_slot = True  # verify() names the slot it took ("node-ip:gpuN") through on_slot

    def __init__(
        self,
        address: str = "auto",
        *,
        device: str = "cuda",
        slots: int | None = None,
        per_gpu: int = 1,
        start_timeout_s: float = ACTOR_START_TIMEOUT_S,
    ):
        self.address = address
        self.device = device
        self.requested_slots = slots
        # workers per actor (per GPU), sharing it through the actor's GpuArbiter: each
        # is a slot of the runner's (named "node-ip:gpuN/j")
        self.per_gpu = max(1, int(per_gpu))
        self.start_timeout_s = start_timeout_s
        self.name = "ray"
        self.retries = 0  # attempts lost with an actor or node (each one re-run by the engine)
        self.token = uuid.uuid4().hex[:8]  # this runner's actors, among others on the cluster
        self.cluster: dict[str, Any] = {}
        self._slots: list[_Slot] = []
        self._free: FreeSlots[_Slot] = FreeSlots(
            lambda s: s.gone is None,
            lambda: (
                "no Ray actor left ("
                + "; ".join(f"{s.label or s.name}: {s.gone}" for s in self._slots)
                + ")"
            ),
        )
        self._started = False
        self._owned = False  # ray.init was ours: close() shuts the connection (or cluster)
        self._ray: Any = None
        self._seen: dict[str, int] = {}  # progress lines relayed, per request

    # --- Runner -------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        live = sum(1 for s in self._slots if s.gone is None)
        return live if self._started else (self.requested_slots or 1) * self.per_gpu

    async def start(self) -> None:
        """Connect, start the actors and their workers. RayUnavailable (one line) when ray
        is missing, the cluster unreachable, or no actor could start."""
        if self._started:
            return
        local_cpus = self.requested_slots if self.device == "cpu" else None
        conn = await asyncio.to_thread(connect, self.address, local_cpus=local_cpus)
        self._owned = bool(conn["owned"])
        import ray

        self._ray = ray
        try:
            await self._start_actors(conn)
        except BaseException:
            await self.close()
            raise
        self._started = True

    async def _start_actors(self, conn: dict[str, Any]) -> None:
        ray = self._ray
        nodes = await asyncio.to_thread(cluster_nodes)
        gpus = sum(n["gpus"] for n in nodes)
        where = conn["address"]
        if self.device == "cuda":
            if gpus == 0:
                raise RayUnavailable(
                    f"the Ray cluster at {where} has no GPUs "
                    "(--device cpu --ray-slots N runs CPU actors with the Triton interpreter)"
                )
            count = min(gpus, self.requested_slots or gpus)
            resources: dict[str, Any] = {"num_gpus": 1, "num_cpus": 0}
        else:
            count = self.requested_slots or 1
            resources = {"num_cpus": 1}
        actor_class = ray.remote(VerifierActor)
        for i in range(count):
            name = f"verifier-{self.token}-{i}"
            actor = actor_class.options(
                name=name,
                namespace=NAMESPACE,
                max_concurrency=64,
                max_restarts=0,
                **resources,
            ).remote(self.device, i, self.per_gpu)
            self._slots.append(_Slot(i, actor, name))
        hellos = await asyncio.gather(
            *(self._hello(s) for s in self._slots), return_exceptions=True
        )
        for slot, hello in zip(self._slots, hellos, strict=True):
            if isinstance(hello, asyncio.CancelledError):
                raise hello
            if isinstance(hello, BaseException):
                slot.gone = error_line(hello)
            elif hello.get("error"):
                slot.gone = str(hello["error"])
                slot.label = str(hello.get("slot") or slot.name)
            else:
                slot.info = hello
                slot.label = str(hello["slot"])
            if slot.gone is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.actor)
        live = [s for s in self._slots if s.gone is None]
        if not live:
            raise RayUnavailable(self._slots[0].gone if self._slots else "no actor started")
        for slot in self._slots:
            if slot.gone is not None:
                self.notice("error", f"Ray actor {slot.label or slot.name} left: {slot.gone}")
        actors = len(live)
        if self.per_gpu > 1:  # a slot per worker of each actor, interleaved over the actors
            lanes = [
                _Slot(s.index, s.actor, s.name, label=f"{s.label}/{j}", info=s.info)
                for j in range(self.per_gpu)
                for s in live
            ]
            self._slots = [s for s in self._slots if s.gone is not None] + lanes
            live = lanes
        if self.device == "cuda" and any(
            (s.info.get("hello") or {}).get("device") != "cuda" for s in live
        ):
            bad = next(s for s in live if (s.info.get("hello") or {}).get("device") != "cuda")
            raise RayUnavailable(
                f"node {bad.info.get('node_ip')}: the worker sees no CUDA device in its actor"
            )
        self._free.fill(live)
        counts: dict[str, int] = {}
        for s in live[:actors]:
            counts[s.info["node_ip"]] = counts.get(s.info["node_ip"], 0) + 1
        first = live[0].info
        hello = first.get("hello") or {}
        self.cluster = {
            "address": where,
            "dashboard": conn.get("dashboard") or "",
            "ray": ray.__version__,
            "nodes": [{**n, "actors": counts.get(str(n["ip"]), 0)} for n in nodes],
        }
        kind = "GPU" if self.device == "cuda" else "CPU"
        self.name = runner_name(list(counts.values()), kind)
        self.notice(
            "info",
            cluster_line(
                where,
                nodes,
                self.cluster["dashboard"],
                Ray=ray.__version__,
                torch=hello.get("torch"),
                triton=hello.get("triton"),
            )
            + f"; {actors} {kind} actor{'s' if actors != 1 else ''}"
            + (f", {self.per_gpu} workers each" if self.per_gpu > 1 else ""),
        )

    async def _hello(self, slot: _Slot) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.start_timeout_s):
                return await slot.actor.hello.remote()
        except TimeoutError:
            return {
                "error": f"actor {slot.name} did not start within {self.start_timeout_s:g}s "
                "(not enough free GPUs/CPUs on the cluster, or a slow node)"
            }

    async def _verify_on(
        self, slot: _Slot, request: VerifyRequest, on_progress: ProgressFn | None
    ) -> Verdict:
        from kernelladder.verifier.host.client import request_dict

        ray = self._ray
        request_id = uuid.uuid4().hex
        ref = slot.actor.verify.remote(request_dict(request), request_id)
        poller = asyncio.ensure_future(self._follow(slot, request_id, on_progress))
        limit = float(request.timeout_s or 300.0) + self.start_timeout_s + CALL_MARGIN_S
        try:
            async with asyncio.timeout(limit):
                result = await ref
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(ref)  # the actor's WorkerClient kills the candidate's worker
            raise
        except TimeoutError:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            raise self._lose(slot, f"no answer within {limit:g}s") from None
        except _actor_lost_types(ray) as exc:
            raise self._lose(slot, error_line(exc).split(". ")[0]) from None
        except Exception as exc:  # the actor's method itself raised: not the candidate
            raise RunnerLost(f"Ray actor {slot.label}: {error_line(exc)}") from None
        finally:
            poller.cancel()
            with contextlib.suppress(BaseException):
                await poller
        await self._drain_progress(slot, request_id, on_progress)
        if "unavailable" in result:
            raise RunnerLost(f"Ray actor {slot.label}: {result['unavailable']}")
        return Verdict.from_dict(result["verdict"])

    async def _follow(self, slot: _Slot, request_id: str, on_progress: ProgressFn | None) -> None:
        """Relay the actor's progress lines while the attempt runs."""
        while on_progress is not None:
            await asyncio.sleep(PROGRESS_POLL_S)
            await self._drain_progress(slot, request_id, on_progress, forget=False)

    async def _drain_progress(
        self,
        slot: _Slot,
        request_id: str,
        on_progress: ProgressFn | None,
        *,
        forget: bool = True,
    ) -> None:
        seen = self._seen
        try:
            if on_progress is not None:
                lines = await slot.actor.progress.remote(request_id, seen.get(request_id, 0))
                seen[request_id] = seen.get(request_id, 0) + len(lines)
                for gate, message in lines:
                    with contextlib.suppress(Exception):
                        on_progress(gate, message)
            if forget:
                seen.pop(request_id, None)
                slot.actor.forget.remote(request_id)
        except Exception:
            return  # progress is a convenience; the verdict (or the loss) says what happened

    def _lose(self, slot: _Slot, why: str) -> RunnerLost:
        """The slot's actor is gone, and with it every slot (worker) it had."""
        self.retries += 1
        if slot.gone is None:
            for other in self._slots:
                if other.actor is slot.actor and other.gone is None:
                    other.gone = why
            self._free.drop()
            where = slot.info.get("node_ip") or "?"
            self.notice("error", f"Ray actor {slot.label} (node {where}) left the pool: {why}")
            with contextlib.suppress(Exception):
                self._ray.kill(slot.actor)
        return RunnerLost(f"Ray actor {slot.label} lost during the attempt: {why}")

    async def close(self) -> None:
        ray = self._ray
        if ray is None:
            if self._owned:
                with contextlib.suppress(Exception):
                    import ray as ray_module

                    ray_module.shutdown()
            return
        actors = {id(s.actor): s.actor for s in self._slots}  # an actor's workers: its slots
        live = {id(s.actor): s.actor for s in self._slots if s.gone is None}
        if live:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(30):
                    await asyncio.gather(
                        *(a.close.remote() for a in live.values()), return_exceptions=True
                    )
        for actor in actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._slots = []
        self._free.clear()
        self._started = False
        if self._owned:
            self._owned = False
            with contextlib.suppress(Exception):
                await asyncio.to_thread(ray.shutdown)

    def describe(self) -> dict[str, Any]:
        live = [s for s in self._slots if s.gone is None]
        hello = next(((s.info.get("hello") or {}) for s in live), {})
        return {
            "device": self.device,
            "gpu": hello.get("gpu"),
            "slots": len(live) if self._started else self.slots,
            "workers_per_gpu": self.per_gpu,
            "host": f"ray:{self.cluster.get('address') or self.address}",
            "cluster": self.cluster,
            "actors": [
                {
                    "slot": s.label,
                    "name": s.name,
                    "node": s.info.get("node_ip"),
                    "package": s.info.get("package"),
                    "gone": s.gone,
                }
                for s in self._slots
            ],
            "python": hello.get("python"),
            "torch": hello.get("torch"),
            "triton": hello.get("triton"),
            "retries": self.retries,
        }
