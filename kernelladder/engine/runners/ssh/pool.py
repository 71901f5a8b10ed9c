"""Remote verification over SSH: persistent workers per remote GPU (one, or several
sharing it for a pipelined verification), a pool of hosts.

    runner = make_remote_runner(load_remote_config(settings), device="cuda")
    await runner.start()           # connect (verified host keys), sync, start workers
    verdict = await runner.verify(request, on_progress)
    await runner.close()

Each slot is a verifier WorkerClient whose Transport is an SSH channel running
`python -m kernelladder.verifier.worker` on the box (link.WORKER_BOOTSTRAP), so an
attempt pays no handshake, Python start, torch import or CUDA context. A candidate's
crash or hang is a Verdict, as locally; a hung candidate's process group is killed on
the box. A connection that drops during an attempt raises RunnerLost (the engine records
AttemptRetried and runs the attempt again); the next verify reconnects with a bounded
backoff. A host that stays down leaves the pool with a notice and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from kernelladder.engine.protocols import ProgressFn, RunnerLost, VerifyRequest
from kernelladder.engine.runners.free_slots import FreeSlots, SlotPoolRunner
from kernelladder.engine.runners.ssh.config import (
    VISIBLE_DEVICES_PROBE,
    HostConfig,
    RemoteConfig,
    RemoteConfigError,
    physical_gpus,
)
from kernelladder.engine.runners.ssh.link import HostKeyError, HostLink, RemoteError, python_command
from kernelladder.verifier.contract.verdict import Verdict
from kernelladder.verifier.host.client import WorkerClient, WorkerUnavailable
from kernelladder.verifier.host.gpu_arbiter import GpuArbiter

RECONNECT_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # then the host leaves the pool


class _GroupReader:
    """The worker's stdout, minus the bootstrap's first line, which names the process
    group to kill on the box."""

    def __init__(self, reader: Any, transport: SSHTransport):
        self._reader = reader
        self._transport = transport

    async def readline(self) -> bytes:
        while True:
            try:
                line = await self._reader.readline()
            except (asyncssh.Error, OSError):
                # the link dropped: to the client that is EOF; the runner sees link_lost
                self._transport.link_lost = True
                return b""
            if self._transport.pgid is None and line.startswith(b'{"type": "kl-pgid"'):
                with contextlib.suppress(ValueError, TypeError):
                    self._transport.pgid = int(json.loads(line)["pgid"])
                    continue
            return line


class SSHTransport:
    """A worker on the box over one SSH channel (the verifier's Transport protocol)."""

    def __init__(
        self,
        link: HostLink,
        *,
        gpu: int,
        device: str,
        physical: str | None = None,
        sandbox: str | None = None,
    ):
        self.link = link
        self.sandbox = sandbox  # the worker's --sandbox mode (None: KERNELLADDER_SANDBOX)
        self.gpu = gpu
        self.physical = str(gpu) if physical is None else physical  # its CUDA_VISIBLE_DEVICES
        self.device = device
        self.pgid: int | None = None
        self.link_lost = False  # the channel closed with no exit status: the link dropped
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        self._process: Any = None
        self._killed = False

    async def start(self) -> None:
        if not self.link.connected or self.link.conn is None:
            raise RemoteError(f"{self.link.host.target}: not connected")
        from kernelladder.verifier.contract.sandbox import mode_from_env

        sandbox = self.sandbox or mode_from_env()
        command = self.link.worker_command(
            gpu=self.physical, device=self.device, sandbox=sandbox
        ).command
        self._process = await asyncio.wait_for(
            self.link.conn.create_process(command, encoding=None),
            self.link.host.command_timeout_s,
        )
        self.stdin = self._process.stdin
        self.stdout = _GroupReader(self._process.stdout, self)
        self.stderr = self._process.stderr

    async def kill(self) -> None:
        """Close the channel and SIGKILL the worker's process group on the box; when the
        link is down the group is remembered and killed after the reconnect."""
        if self._killed:
            return
        self._killed = True
        process, pgid = self._process, self.pgid
        if process is not None:
            with contextlib.suppress(Exception):
                process.close()
        if pgid is not None:
            await self.link.kill_group(pgid)  # remembered for after a reconnect if down

    async def wait(self) -> int | None:
        if self._process is None:
            return None
        await self._process.channel.wait_closed()
        code = self._process.returncode
        if self._process.exit_status is None and self._process.exit_signal is None:
            self.link_lost = True
            return None
        if self._process.exit_signal is not None and code is None:
            with contextlib.suppress(KeyError):
                return -int(signal.Signals["SIG" + self._process.exit_signal[0]])
        return code

    def describe(self) -> str:
        where = f"cuda:{self.gpu}" if self.device == "cuda" else self.device
        return f"remote worker on {self.link.host.target} ({where}, pgid {self.pgid})"


@dataclass
class _Slot:
    host: _Host
    gpu: int
    client: WorkerClient
    transport: SSHTransport | None = None
    worker: int | None = None  # which of the GPU's workers (None: its only one)

    @property
    def label(self) -> str:
        extra = f"/{self.worker}" if self.worker is not None else ""
        return f"{self.host.config.label}:{self.gpu}{extra}"


@dataclass
class _Host:
    config: HostConfig
    link: HostLink
    slots: list[_Slot] = field(default_factory=list)
    gone: str | None = None  # why it left the pool
    hello: dict[str, Any] = field(default_factory=dict)
    reconnect_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reconnects: int = 0
    physical: dict[int, str] = field(default_factory=dict)  # index -> CUDA_VISIBLE_DEVICES


class PoolRunner(SlotPoolRunner):
    """The engine's Runner over one or more SSH hosts; one slot per configured GPU. Its
    notices ("a host left the pool", "reconnected") go through RunnerBase.notice."""

    reports_slot = True  # verify() names the slot it took ("host:gpu") through on_slot

    def __init__(
        self,
        config: RemoteConfig,
        *,
        device: str = "cuda",
        root: Any = None,
        reconnect_delays_s: tuple[float, ...] = RECONNECT_DELAYS_S,
        per_gpu: int = 1,
    ):
        if not config.hosts:
            raise ValueError("a remote runner needs at least one host")
        self.config = config
        self.device = device
        self.name = (
            f"ssh:{config.hosts[0].target}"
            if len(config.hosts) == 1
            else f"pool:{len(config.hosts)}"
        )
        self.retries = 0  # attempts lost to a dropped link (each one re-run by the engine)
        self.reconnect_delays_s = tuple(reconnect_delays_s)
        self._hosts = [_Host(h, HostLink(h, root=root)) for h in config.hosts]
        self.per_gpu = max(1, int(per_gpu))
        for host in self._hosts:
            # a pipelined verification: per_gpu workers share each remote GPU through
            # its arbiter, as locally (one compiles ahead while another times)
            arbiters = {gpu: GpuArbiter(f"{host.config.label}:{gpu}") for gpu in host.config.gpus}
            for j in range(self.per_gpu):
                for gpu in host.config.gpus:
                    worker = j if self.per_gpu > 1 else None
                    host.slots.append(self._make_slot(host, gpu, arbiters[gpu], worker))
        self._free: FreeSlots[_Slot] = FreeSlots(
            lambda s: s.host.gone is None,
            lambda: (
                "no SSH host left in the pool ("
                + "; ".join(f"{h.config.label}: {h.gone}" for h in self._hosts)
                + ")"
            ),
        )
        self._started = False

    def _make_slot(
        self, host: _Host, gpu: int, arbiter: GpuArbiter | None = None, worker: int | None = None
    ) -> _Slot:
        slot: _Slot

        def factory() -> SSHTransport:
            physical = host.physical.get(gpu)
            slot.transport = SSHTransport(host.link, gpu=gpu, device=self.device, physical=physical)
            return slot.transport

        client = WorkerClient(
            factory, start_timeout_s=host.config.worker_start_timeout_s, arbiter=arbiter
        )
        slot = _Slot(host, gpu, client, worker=worker)
        return slot

    # --- Runner -------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return sum(len(h.slots) for h in self._hosts if h.gone is None)

    @property
    def live_hosts(self) -> list[str]:
        return [h.config.label for h in self._hosts if h.gone is None]

    async def start(self) -> None:
        """Connect, sync and start every worker. A host key problem stops everything (a
        person must look at it); another host failing leaves the pool with a notice;
        RemoteError when no host is usable."""
        if self._started:
            return
        results = await asyncio.gather(
            *(self._start_host(h) for h in self._hosts), return_exceptions=True
        )
        for host, result in zip(self._hosts, results, strict=True):
            if isinstance(result, HostKeyError):
                await self.close()
                raise result
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                host.gone = _one_line(result)
                self.notice("error", f"{host.config.label} left the pool: {host.gone}")
        if not self.live_hosts:
            first = next(h.gone for h in self._hosts if h.gone)
            await self.close()
            raise RemoteError(first)
        self._free.fill(s for h in self._hosts if h.gone is None for s in h.slots)
        self._started = True

    async def _start_host(self, host: _Host) -> None:
        await host.link.connect()
        await host.link.sync()
        host.physical = await self._map_gpus(host)
        try:
            hellos = await asyncio.gather(*(s.client.hello() for s in host.slots))
        except WorkerUnavailable as exc:
            raise RemoteError(f"{host.config.label}: {_one_line(exc)}") from None
        host.hello = dict(hellos[0]) if hellos else {}
        if self.device == "cuda" and host.hello.get("device") != "cuda":
            raise RemoteError(
                f"{host.config.label}: the worker sees no CUDA device "
                "(check the driver, CUDA_VISIBLE_DEVICES and --gpus; `kernelladder doctor --remote`)"
            )

    async def _map_gpus(self, host: _Host) -> dict[int, str]:
        """The configured GPU indices, read into the box's own CUDA_VISIBLE_DEVICES when
        its login environment sets one (config.physical_gpus)."""
        link = host.link
        command = python_command(
            host.config, python=link.python or host.config.python, code=VISIBLE_DEVICES_PROBE
        )
        result = await link.run(command)
        try:
            visible = json.loads(str(result.stdout).strip().splitlines()[-1])
        except (ValueError, IndexError):
            visible = None  # that Python does not run: the worker's start says why
        if not isinstance(visible, str):
            visible = None
        gpus = host.config.gpus
        try:
            mapped = physical_gpus(gpus, visible, where=host.config.label)
        except RemoteConfigError as exc:
            if self.device == "cuda":
                raise RemoteError(str(exc)) from None
            return {}  # a CPU run uses no GPU: the indices stay as given
        return dict(zip(gpus, mapped, strict=True))

    async def _slot_ready(self, slot: _Slot) -> bool:
        return await self._ensure_host(slot.host)

    async def _ensure_host(self, host: _Host) -> bool:
        """Reconnect a dropped link (bounded backoff). False once the host has left."""
        if host.gone is not None:
            return False
        if host.link.connected:
            return True
        async with host.reconnect_lock:
            if host.gone is not None:
                return False
            if host.link.connected:
                return True
            last = ""
            for delay in self.reconnect_delays_s:
                try:
                    await host.link.connect()
                    await host.link.kill_stale_groups()
                    await host.link.sync()
                    host.reconnects += 1
                    self.notice("warning", f"reconnected to {host.config.label}")
                    return True
                except HostKeyError as exc:
                    last = _one_line(exc)  # never retried: the key itself is the problem
                    break
                except RemoteError as exc:
                    last = _one_line(exc)
                await asyncio.sleep(delay)
            host.gone = last or "unreachable"
            message = f"{host.config.label} left the pool: {host.gone}"
            self.notice("error", message)
            for slot in host.slots:
                with contextlib.suppress(Exception):
                    await slot.client.close()
            self._free.wake()
            return False

    async def _verify_on(
        self, slot: _Slot, request: VerifyRequest, on_progress: ProgressFn | None
    ) -> Verdict:
        host = slot.host
        try:
            verdict = await slot.client.verify(
                request, on_progress=on_progress, timeout_s=request.timeout_s
            )
        except WorkerUnavailable as exc:
            if self._lost_during(slot):
                raise self._lost(slot) from None
            raise RunnerLost(f"{host.config.label}: {_one_line(exc)}") from None
        if verdict.kind in ("crash", "timeout") and self._lost_during(slot):
            raise self._lost(slot)
        return verdict

    def _lost_during(self, slot: _Slot) -> bool:
        transport = slot.transport
        return slot.host.link.lost.is_set() or (transport is not None and transport.link_lost)

    def _lost(self, slot: _Slot) -> RunnerLost:
        self.retries += 1
        with contextlib.suppress(Exception):
            slot.host.link.lost.set()
        return RunnerLost(f"connection to {slot.host.config.label} lost during the attempt")

    async def close(self) -> None:
        for host in self._hosts:
            await asyncio.gather(*(s.client.close() for s in host.slots), return_exceptions=True)
            await host.link.close()
        self._started = False

    def describe(self) -> dict[str, Any]:
        hello = next((h.hello for h in self._hosts if h.hello), {})
        return {
            "device": self.device,
            "gpu": hello.get("gpu"),
            "sandbox": hello.get("sandbox"),
            "slots": self.slots,
            "workers_per_gpu": self.per_gpu,
            "host": ", ".join(str(h.config.target) for h in self._hosts),
            "hosts": [
                {
                    "name": h.config.label,
                    "target": str(h.config.target),
                    "gpus": list(h.config.gpus),
                    "physical_gpus": [h.physical.get(g, str(g)) for g in h.config.gpus],
                    "container": h.config.container,
                    "gpu": h.hello.get("gpu"),
                    "tree": h.link.last_sync.tree if h.link.last_sync else None,
                    "reconnects": h.reconnects,
                    "gone": h.gone,
                }
                for h in self._hosts
            ],
            "python": hello.get("python"),
            "torch": hello.get("torch"),
            "triton": hello.get("triton"),
            "retries": self.retries,
        }


class SSHRunner(PoolRunner):
    """The runner for one SSH host (its slots are its GPUs)."""

    def __init__(self, host: HostConfig, *, device: str = "cuda", **options: Any):
        super().__init__(RemoteConfig(hosts=(host,)), device=device, **options)


def make_remote_runner(config: RemoteConfig, *, device: str = "cuda", **options: Any) -> PoolRunner:
    """SSHRunner for one host, PoolRunner for several (options: root, reconnect_delays_s)."""
    if len(config.hosts) == 1:
        return SSHRunner(config.hosts[0], device=device, **options)
    return PoolRunner(config, device=device, **options)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:400]
