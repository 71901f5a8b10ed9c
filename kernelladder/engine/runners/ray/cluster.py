"""A Ray cluster as the Ray runner and `kernelladder doctor --ray` see it: connecting
(shipping the package as the runtime environment's py_modules), its live nodes, probing
each node's Python, torch, Triton and GPUs, and the one line that names it.

Nothing here imports ray at module level: only a run or a doctor that chose Ray needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import sys
from typing import Any

from kernelladder.engine.protocols import RunnerLost
from kernelladder.verifier.contract.sandbox import ENV_VAR as SANDBOX_ENV

NAMESPACE = "kernelladder"  # the actors' Ray namespace (a test or an operator finds them here)
ADDRESS_ENV = "KL_RAY_ADDRESS"
MISSING_RAY = (
    "the Ray runner needs the ray package on this machine: pip install 'kernelladder[ray]'"
)
LOCAL_OBJECT_STORE = 128 * 1024**2  # verdicts are small; a local cluster needs little


class RayUnavailable(RunnerLost):
    """ray is not installed, or the cluster cannot be reached: one line for a person."""


def ray_installed() -> bool:
    """Whether ray can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # blocked, or a broken half-installed ray
        return False


def resolve_address(given: str | None) -> str | None:
    """--ray-address, else KL_RAY_ADDRESS; None when neither is set."""
    address = given if given is not None else os.environ.get(ADDRESS_ENV)
    return address.strip() if address is not None else None


def package_dir() -> str:
    """The kernelladder package directory that runtime_env py_modules ships."""
    import kernelladder

    return os.path.dirname(os.path.abspath(kernelladder.__file__))


def error_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:400]


def node_probe() -> dict[str, Any]:
    """What a node offers: Python, torch, Triton, Ray, its GPUs and where the shipped
    package was unpacked. Run as a Ray task pinned to that node (the doctor)."""
    import platform
    import socket

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "hostname": socket.gethostname(),
        "gpus": [],
    }
    for name in ("ray", "torch", "triton", "numpy"):
        try:
            out[name] = getattr(__import__(name), "__version__", "?")
        except Exception as exc:
            out[name] = None
            out[name + "_error"] = error_line(f"{type(exc).__name__}: {exc}")[:200]
    if out["torch"]:
        try:
            import torch

            out["cuda_version"] = torch.version.cuda
            if torch.cuda.is_available():
                count = torch.cuda.device_count()
                out["gpus"] = [torch.cuda.get_device_name(i) for i in range(count)]
        except Exception as exc:
            out["cuda_error"] = error_line(exc)[:200]
    import kernelladder

    out["package"] = os.path.dirname(os.path.abspath(kernelladder.__file__))
    return out


def connect(address: str, *, local_cpus: int | None = None) -> dict[str, Any]:
    """ray.init for `address` ("local": a cluster started in this process; "auto": the
    one this machine belongs to; else HOST:PORT or ray://...), shipping the package as
    runtime_env py_modules. {"started": bool, "address": ..., "dashboard": ...}.
    RayUnavailable with one line when ray is missing or the cluster unreachable."""
    if not ray_installed():
        raise RayUnavailable(MISSING_RAY)
    import logging

    import ray

    if ray.is_initialized():  # the caller connected already (its runtime_env applies)
        ctx = ray.get_runtime_context()
        return {"started": False, "address": ctx.gcs_address, "dashboard": "", "owned": False}
    runtime_env: dict[str, Any] = {
        "py_modules": [package_dir()],
        "excludes": ["__pycache__", "*.pyc"],
    }
    if os.environ.get(SANDBOX_ENV):  # --sandbox: the actors' workers obey it too
        runtime_env["env_vars"] = {SANDBOX_ENV: os.environ[SANDBOX_ENV]}
    kwargs: dict[str, Any] = dict(
        runtime_env=runtime_env,
        namespace=NAMESPACE,
        log_to_driver=False,  # worker stderr belongs to the verdicts, not the terminal
        logging_level=logging.ERROR,  # e.g. "SIGTERM handler is not set" from a thread
        configure_logging=True,
    )
    if address == "local":
        kwargs.update(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE)
        if local_cpus:
            kwargs["num_cpus"] = local_cpus
    else:
        kwargs["address"] = address
    try:
        with _real_std_streams():
            ctx = ray.init(**kwargs)
    except Exception as exc:
        with contextlib.suppress(Exception):
            ray.shutdown()
        where = "a local Ray cluster" if address == "local" else f"the Ray cluster at {address}"
        raise RayUnavailable(f"cannot connect to {where}: {error_line(exc)}") from None
    info = getattr(ctx, "address_info", {}) or {}
    return {
        "started": address == "local",
        "address": info.get("gcs_address") or address,
        "dashboard": getattr(ctx, "dashboard_url", "") or "",
        "owned": True,
    }


@contextlib.contextmanager
def _real_std_streams() -> Any:
    """stdout/stderr with real file descriptors while Ray starts (it hands them to
    faulthandler); the app captures them in objects that have none. Ray writes nothing
    there at this logging level, so /dev/null stands in."""

    def real(stream: Any) -> bool:
        try:
            return stream.fileno() >= 0
        except Exception:
            return False

    if real(sys.stdout) and real(sys.stderr):
        yield
        return
    saved = sys.stdout, sys.stderr
    with open(os.devnull, "w") as null:
        sys.stdout = sys.stdout if real(sys.stdout) else null
        sys.stderr = sys.stderr if real(sys.stderr) else null
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved


def cluster_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes: id, ip, hostname, GPUs, CPUs (ray.nodes())."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources") or {}
        nodes.append(
            {
                "node_id": n.get("NodeID"),
                "ip": n.get("NodeManagerAddress"),
                "hostname": n.get("NodeManagerHostname"),
                "gpus": int(res.get("GPU", 0)),
                "cpus": int(res.get("CPU", 0)),
            }
        )
    return nodes


async def probe_nodes(nodes: list[dict[str, Any]], timeout_s: float = 180.0) -> list[dict]:
    """node_probe() on every node (pinned there): the node's fields and the probe's, or
    "error" with one line."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(node_probe)

    async def one(node: dict[str, Any]) -> dict[str, Any]:
        strategy = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
        ref = task.options(num_cpus=0, scheduling_strategy=strategy).remote()
        # the probe's "gpus" are the GPU names torch sees; Ray's own count is "ray_gpus"
        seen = {**node, "ray_gpus": node["gpus"], "gpus": []}
        try:
            async with asyncio.timeout(timeout_s):
                return {**seen, **(await ref)}
        except TimeoutError:
            ray.cancel(ref, force=True)
            return {**seen, "error": f"no answer within {timeout_s:g}s"}
        except Exception as exc:
            return {**seen, "error": error_line(exc)}

    return list(await asyncio.gather(*(one(n) for n in nodes)))


def cluster_line(address: str, nodes: list[dict[str, Any]], dashboard: str, **versions: Any) -> str:
    """One line for a person: nodes, GPUs per node, versions, the dashboard."""
    per_node = ", ".join(f"{n.get('ip')} {n.get('gpus', 0)} GPU" for n in nodes)
    parts = [f"Ray cluster at {address}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}"]
    if per_node:
        parts[0] += f" ({per_node})"
    parts += [f"{k} {v}" for k, v in versions.items() if v]
    parts.append(f"dashboard {dashboard}" if dashboard else "no dashboard")
    return "; ".join(parts)
