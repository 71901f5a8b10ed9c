"""The Ray actor that verifies on a node: it owns persistent verifier workers there and
answers the Ray runner's calls (hello, verify, progress, forget, status, close)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any

from kernelladder.engine.runners.ray.cluster import error_line, package_dir


def _missing_on_node() -> str:
    """'' when this node's Python has torch and Triton, else what is missing."""

    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):
            return True

    return " and ".join(m for m in ("torch", "triton") if absent(m))


class VerifierActor:
    """A Ray actor (async: its calls share one event loop) that owns `lanes` persistent
    verifier workers on its node, sharing its GPU through one GpuArbiter as the local
    pool's workers share theirs (a pipelined verification compiles ahead in one while
    another times): the same WorkerClient and LocalTransport as the local runner, so
    the workers, their protocol and their sandbox are the local ones. The runner sends
    it at most `lanes` verifications at once."""

    def __init__(self, device: str, index: int, lanes: int = 1):
        self.device = device
        self.index = index
        self.lanes = max(1, int(lanes))
        self.clients: list[Any] = []
        self._idle: list[int] = []  # lanes free for the next verification
        self.busy: dict[str, int] = {}  # request id -> the lane verifying it
        self.progress_log: dict[str, list[tuple[str, str]]] = {}
        self.slot = ""

    def _where(self) -> tuple[str, str]:
        import socket

        import ray

        return ray.util.get_node_ip_address(), socket.gethostname()

    async def hello(self) -> dict[str, Any]:
        """Start the worker; its hello plus the node. {"error": line} when it cannot."""
        import ray

        from kernelladder.verifier.host.client import (
            LocalTransport,
            WorkerClient,
            WorkerUnavailable,
        )

        ip, host = self._where()
        gpus = [str(g) for g in ray.get_gpu_ids()]
        kind = f"gpu{gpus[0]}" if self.device == "cuda" and gpus else f"{self.device}{self.index}"
        self.slot = f"{ip}:{kind}"
        base = {
            "slot": self.slot,
            "node_ip": ip,
            "hostname": host,
            "node_id": ray.get_runtime_context().get_node_id(),
            "ray": ray.__version__,
            "package": package_dir(),
            "executable": sys.executable,
        }
        missing = _missing_on_node()
        if missing:
            return {
                **base,
                "error": f"node {ip} ({host}): its Python {sys.executable} has no {missing}; "
                "the verifier needs torch and Triton on every node",
            }
        if not self.clients:
            from kernelladder.verifier.host.gpu_arbiter import GpuArbiter

            cuda = 0 if self.device == "cuda" else None  # index into the actor's GPUs
            arbiter = GpuArbiter(self.slot)
            self.clients = [
                WorkerClient(lambda: LocalTransport(self.device, cuda_device=cuda), arbiter=arbiter)
                for _ in range(self.lanes)
            ]
            self._idle = list(range(self.lanes))
        try:
            hellos = await asyncio.gather(*(c.hello() for c in self.clients))
        except WorkerUnavailable as exc:
            return {**base, "error": f"node {ip} ({host}): {error_line(exc)}"}
        return {**base, "hello": hellos[0], "lanes": self.lanes}

    async def verify(self, request: dict[str, Any], request_id: str) -> dict[str, Any]:
        """{"verdict": Verdict.to_dict()}, or {"unavailable": line} when no worker can
        take it (not the candidate's fault)."""
        from kernelladder.verifier.host.client import WorkerUnavailable

        if not self._idle:
            return {"unavailable": f"all {self.lanes} of its workers are busy"}
        lane = self._idle.pop(0)
        log = self.progress_log.setdefault(request_id, [])
        self.busy[request_id] = lane
        try:
            verdict = await self.clients[lane].verify(
                request,
                on_progress=lambda gate, message: log.append((gate, message)),
                timeout_s=request.get("timeout_s"),
            )
            return {"verdict": verdict.to_dict()}
        except WorkerUnavailable as exc:
            return {"unavailable": error_line(exc)}
        finally:
            self.busy.pop(request_id, None)
            self._idle.append(lane)

    async def progress(self, request_id: str, since: int) -> list[tuple[str, str]]:
        return list(self.progress_log.get(request_id, [])[since:])

    async def forget(self, request_id: str) -> None:
        self.progress_log.pop(request_id, None)

    async def status(self) -> dict[str, Any]:
        return {"slot": self.slot, "busy": bool(self.busy), "busy_lanes": len(self.busy)}

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
