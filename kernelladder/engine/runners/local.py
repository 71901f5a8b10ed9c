"""The local runner: the verifier's long-lived workers on this machine (one per GPU, or
one CPU interpreter worker), and make_runner, which builds the runner a run's options ask
for (a kind of runners/registry.py, else this one).

A candidate's crash, hang or cheat is a Verdict. RunnerLost means the worker
infrastructure itself failed (a worker that cannot start, a protocol breakdown) and the
engine may retry the attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from kernelladder.engine.protocols import ProgressFn, Runner, RunnerBase, RunnerLost, VerifyRequest
from kernelladder.engine.run.options import KEEP_WORKERS_ENV, RunOptions
from kernelladder.engine.runners.registry import chosen_kind, verifies_elsewhere
from kernelladder.verifier.contract.verdict import Verdict
from kernelladder.verifier.host.gpu_arbiter import EXCLUSIVE, SHARED

NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # one entry per GPU the driver knows


def default_device(options: RunOptions | None = None) -> str:
    """The device a run verifies on: its --device when given; else its runner's default
    (SSH: cuda, the box's GPUs; Ray: cpu actors with --ray-slots, else the cluster's GPUs);
    here (and with no options), cuda when this machine has a GPU torch can use, else the
    CPU interpreter. Read without importing torch where it can be (gpus_seen_without_torch)."""
    if options is not None and options.device:
        return options.device
    kind = chosen_kind(options) if options is not None else None
    if kind is not None and kind.device is not None:
        return kind.device(options)
    if gpus_seen_without_torch():
        return "cuda"
    if torch_built_for_cpu_only():  # such a torch never has a GPU to use: no need to ask it
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def _gpu_count() -> int:
    seen = gpus_seen_without_torch()
    if seen:
        return seen
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except Exception:
        return 1


def torch_built_with_cuda() -> bool:
    """Whether the installed torch is a CUDA build, read from its version.py without
    importing it (torch's import costs seconds); False when that cannot be told."""
    text = _torch_version_py()
    return text is not None and cuda_in_version_py(text)


def torch_built_for_cpu_only() -> bool:
    """Whether the installed torch is a build for the CPU alone (version.py names neither
    a CUDA nor a ROCm version), told without importing it; False when that cannot be told."""
    text = _torch_version_py()
    if text is None or not re.search(r"^cuda\b", text, re.MULTILINE):
        return False  # no torch, or a version.py of another shape: torch is asked
    return not cuda_in_version_py(text) and not _version_py_names(text, "hip")


def _torch_version_py() -> str | None:
    import importlib.util

    with contextlib.suppress(Exception):
        spec = importlib.util.find_spec("torch")
        for root in (spec.submodule_search_locations or []) if spec else []:
            with open(os.path.join(root, "version.py"), encoding="utf-8") as f:
                return f.read()
    return None


def cuda_in_version_py(text: str) -> bool:
    """torch/version.py's `cuda = '13.0'` (a CUDA build) rather than `cuda = None`."""
    return _version_py_names(text, "cuda")


def _version_py_names(text: str, field: str) -> bool:
    """Whether torch/version.py gives `field` a version (`hip = '6.4'`), not None."""
    m = re.search(rf"^{field}\b[^=\n]*=\s*(\S+)", text, re.MULTILINE)
    return bool(m) and m.group(1) not in ("None", "''", '""')


def gpus_seen_without_torch() -> int:
    """The GPUs a run here would use, told without importing torch: the driver's
    entries (gpus_without_torch) when the installed torch is a CUDA build; 0 when that
    cannot be told this way (the caller asks torch: a CPU machine, a CPU build of torch
    beside a driver)."""
    gpus = gpus_without_torch()
    return gpus if gpus and torch_built_with_cuda() else 0


class LocalRunner(RunnerBase):
    """Runner over the verifier's LocalPool: `slots` workers (default: one per GPU, one
    on the CPU), each started once and reused for many candidates."""

    name = "local"
    reports_slot = True  # verify() names the slot it took through on_slot

    def __init__(
        self,
        device: str = "cpu",
        slots: int | None = None,
        per_gpu: int = 1,
        keep_workers_s: float = 0.0,
        **pool_options: Any,
    ):
        self.device = device
        # > 0: workers kept from an earlier run are taken at the start, the idle ones are
        # handed to the keeper at the end for this long (verifier/host/keeper.py)
        self.keep_workers_s = max(0.0, float(keep_workers_s))
        self._handed_back = False
        self._devices = slots if slots is not None else (_gpu_count() if device == "cuda" else 1)
        self.per_gpu = max(1, int(per_gpu))
        self._slots = self._devices * self.per_gpu
        self._pool_options = pool_options
        self._pool: Any = None
        self._hello: dict[str, Any] = {}
        self._free: asyncio.Queue[tuple[str, Any]] | None = None  # (slot, worker client)
        # the end's re-measure: a worker of its own, started ahead (prepare_fresh_worker)
        self._fresh: Any = None  # WorkerClient
        self._fresh_start: asyncio.Future[Any] | None = None
        self._fresh_slot = ""
        self._fresh_used = False  # it has timed a re-measure: a new fresh request replaces it

    @property
    def slots(self) -> int:
        return self._slots

    async def start(self) -> None:
        from kernelladder.verifier.host.client import WorkerUnavailable
        from kernelladder.verifier.host.pool import LocalPool

        if self._pool is None:
            self._pool = LocalPool(
                self.device,
                self._devices,
                per_gpu=self.per_gpu,
                keep_s=self.keep_workers_s,
                **self._pool_options,
            )
        try:
            hellos = await self._pool.start()
        except WorkerUnavailable as exc:
            raise RunnerLost(str(exc)) from None
        self._hello = dict(hellos[0]) if hellos else {}
        if self._pool.taken:
            self.notice("info", took_line(self._pool.taken))
        started = start_line(hellos, self._pool.taken)
        if started:
            self.notice("info", started)

    async def verify(
        self,
        request: VerifyRequest,
        on_progress: ProgressFn | None = None,
        on_slot: Callable[[str], None] | None = None,
    ) -> Verdict:
        from kernelladder.verifier.host.client import WorkerUnavailable

        if self._pool is None:
            await self.start()
        if self._free is None:
            # named by the GPU it runs on (cuda:1), and which of its workers (cuda:1/2)
            self._free = asyncio.Queue()
            for slot, client in zip(self._pool.slot_names, self._pool.clients, strict=True):
                self._free.put_nowait((slot, client))
        if getattr(request, "fresh_worker", False) or (
            self._fresh is not None and getattr(request, "pair_every_shape", False)
        ):
            return await self._verify_fresh(request, on_progress, on_slot)
        free = self._free
        slot, client = await free.get()
        try:
            if on_slot is not None:
                on_slot(slot)
            return await client.verify(
                request, on_progress=on_progress, timeout_s=request.timeout_s
            )
        except WorkerUnavailable as exc:
            raise RunnerLost(str(exc)) from None
        finally:
            free.put_nowait((slot, client))

    def prepare_fresh_worker(self, op: Any = None) -> None:
        """Start the re-measure's worker now, beside the pool's (its start -- Python, torch,
        the CUDA context -- overlaps the last verifications instead of following them),
        then have it compile `op`'s torch.compile baselines (the GPU to itself), so the
        re-measure's timing turns wait for no compile."""
        if self._pool is None or self._fresh is not None or not self._pool.clients:
            return
        from kernelladder.verifier.host.client import WorkerClient

        first = self._pool.clients[0]  # its GPU, arbiter and transport
        self._fresh = WorkerClient(first._factory, arbiter=first.arbiter)
        self._fresh.redactor = first.redactor
        self._fresh_slot = f"{self._pool.slot_names[0]}/fresh"
        self._fresh_start = asyncio.ensure_future(self._start_fresh(self._fresh, op))

    async def _start_fresh(self, fresh: Any, op: Any) -> dict[str, Any]:
        """The fresh worker's hello; then, on a GPU, its baselines compiled for `op` (a
        compile that fails is left to its first verification, which says so)."""
        hello = await fresh.hello()
        if op is not None and self.device == "cuda":
            await fresh.prepare(op, self.device)
        return hello

    async def _verify_fresh(
        self,
        request: VerifyRequest,
        on_progress: ProgressFn | None,
        on_slot: Callable[[str], None] | None,
    ) -> Verdict:
        """A request for a worker that has timed nothing yet, and the ones after it that
        re-measure (pair_every_shape): the worker started ahead for them (or now)."""
        from dataclasses import replace

        from kernelladder.verifier.host.client import WorkerUnavailable

        self.prepare_fresh_worker()
        assert self._fresh is not None and self._fresh_start is not None
        try:
            await self._fresh_start  # started ahead: usually done by now
        except WorkerUnavailable:
            pass  # verify() starts it again, and says why if it cannot
        if on_slot is not None:
            on_slot(self._fresh_slot)
        # one that has timed nothing yet is not replaced
        fresh = bool(request.fresh_worker) and self._fresh_used
        self._fresh_used = True
        try:
            return await self._fresh.verify(
                replace(request, fresh_worker=fresh),
                on_progress=on_progress,
                timeout_s=request.timeout_s,
            )
        except WorkerUnavailable as exc:
            raise RunnerLost(str(exc)) from None

    def gpu_alone(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Every local GPU to the caller (an Nsight Compute replay): each GPU's arbiter
        taken exclusively, in order, so no worker of the pool times or runs correctness
        beside it (a compile ahead needs no GPU and goes on)."""
        return self._every_arbiter(EXCLUSIVE)

    def gpu_shared(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Every local GPU beside correctness runs but no timing (a profile's warm-up)."""
        return self._every_arbiter(SHARED)

    @contextlib.asynccontextmanager
    async def _every_arbiter(self, mode: str) -> AsyncIterator[None]:
        if self._pool is None:
            yield
            return
        taken = []
        try:
            for arbiter in self._pool.arbiters:
                await arbiter.acquire(mode)
                taken.append(arbiter)
            yield
        finally:
            for arbiter in reversed(taken):
                arbiter.release(mode)

    async def hand_back_workers(self) -> None:
        """The idle workers (the re-measure's too) go to the keeper for the next run on
        this machine, said in a notice; those that cannot are left to close()."""
        if self._handed_back or self._pool is None or self.keep_workers_s <= 0:
            return
        self._handed_back = True
        from kernelladder.verifier.host.pool import keep_idle_workers

        clients = list(self._pool.clients)
        if self._fresh is not None and self._fresh_start is not None and self._fresh_start.done():
            clients.append(self._fresh)
        kept = await keep_idle_workers(clients, self.keep_workers_s)
        if kept:
            self.notice("info", kept_line(kept, self.keep_workers_s))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.hand_back_workers()  # the engine asked already, before its end
        if self._pool is not None:
            self._pool.keep_s = 0.0  # those not kept just now are shut down
        self._free = None
        if self._fresh is not None:
            fresh, self._fresh = self._fresh, None
            if self._fresh_start is not None and not self._fresh_start.done():
                self._fresh_start.cancel()
            with contextlib.suppress(Exception):
                await fresh.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def describe(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gpu": self._hello.get("gpu"),
            "slots": self._slots,
            "workers_per_gpu": self.per_gpu,
            "host": "local",
            "python": self._hello.get("python"),
            "torch": self._hello.get("torch"),
            "triton": self._hello.get("triton"),
            "sandbox": self._hello.get("sandbox"),
        }


def _workers(pids: list[int]) -> str:
    plural = "s" if len(pids) != 1 else ""
    return f"{len(pids)} verifier worker{plural} (pid {', '.join(map(str, pids))})"


def took_line(pids: list[int]) -> str:
    return f"took {_workers(pids)} kept from an earlier run: no start to wait for"


def start_line(hellos: list[dict[str, Any]], taken: list[int]) -> str:
    """Where the start of the run's slowest new worker went, from its hello's setup_s
    (seconds per step: imports, device, selftest, ops_and_walls, compilers); "" when
    every worker was kept from an earlier run or none said."""
    kept = set(taken)
    steps = [h.get("setup_s") for h in hellos if h.get("pid") not in kept]
    steps = [s for s in steps if isinstance(s, dict) and s]
    if not steps:
        return ""
    slowest = max(steps, key=lambda s: sum(float(v) for v in s.values()))
    total = sum(float(v) for v in slowest.values())
    parts = ", ".join(f"{k.replace('_', ' ')} {float(v):.1f}" for k, v in slowest.items())
    plural = f"the slowest of {len(steps)}" if len(steps) > 1 else "one"
    return f"verifier workers started in {total:.1f} s ({plural}: {parts} s)"


def kept_line(pids: list[int], seconds: float) -> str:
    return (
        f"kept {_workers(pids)} warm for the next run on this machine, for {seconds:g} s "
        "idle at most: `kernelladder doctor --stop-workers` stops them, --keep-workers 0 "
        f"(or {KEEP_WORKERS_ENV}=0) keeps none"
    )


def gpus_without_torch(environ: dict[str, str] | None = None) -> int:
    """How many GPUs this process would see, read without importing torch: the NVIDIA
    driver's entries under /proc, at most as many as CUDA_VISIBLE_DEVICES names; 0 when
    there are none (or the variable hides them)."""
    env = os.environ if environ is None else environ
    try:
        found = len(os.listdir(NVIDIA_GPUS))
    except OSError:
        return 0
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        named = [v.strip() for v in visible.split(",") if v.strip()]
        if not named or named[0].startswith("-"):
            return 0
        found = min(found, len(named))
    return found


def start_workers_ahead(options: RunOptions) -> int:
    """A local GPU run's workers, started before its op is loaded (the CLI imports torch
    and builds the run meanwhile: seconds, more on a cold box): taken from the keeper
    where kept ones are, else spawned now; the run's pool claims them as it starts, and
    those it does not (another device or GPU count than torch then finds) are killed.
    CPU runs (short starts; the test suite's) start as before. How many were started."""
    if verifies_elsewhere(options) or options.device == "cpu":
        return 0
    gpus = gpus_without_torch()
    if options.device is None and gpus == 0:
        return 0
    try:
        keep = options.keep_workers_seconds("cuda")
    except ValueError:  # create_run says what is wrong with it
        return 0
    from kernelladder.verifier.host.pool import start_ahead

    return len(start_ahead("cuda", max(1, gpus), options.worker_count(), keep))


def make_runner(options: RunOptions, device: str) -> Runner:
    """The runner a run's options ask for: the first kind of runner (runners/registry.py)
    that they choose (SSH with --remote, Ray, --runner NAME), else the local pool."""
    per_gpu = options.worker_count() if device == "cuda" else 1
    kind = chosen_kind(options)
    if kind is not None:
        return kind.make(options, device, per_gpu)
    return LocalRunner(
        device=device, per_gpu=per_gpu, keep_workers_s=options.keep_workers_seconds(device)
    )
