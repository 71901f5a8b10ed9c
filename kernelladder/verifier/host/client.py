"""The caller's side of the worker protocol: start, verify, replace, never hang.

`WorkerClient` drives one long-lived worker through a `Transport` (a local subprocess
here; the SSH runner supplies its own). Every read has a deadline. A candidate's fault
is always a `Verdict` (timeout -> kind "timeout", worker death -> kind "crash"); only a
worker that cannot be started at all raises `WorkerUnavailable`. Every string that comes
back is passed through the `Redactor` built from the caller's secret values.

Imports only the standard library and the verifier's plain-data modules (no torch), so
the engine and the CLI pay nothing for it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kernelladder.verifier.contract.env import Redactor, secret_values
from kernelladder.verifier.contract.protocol import PROTOCOL_VERSION, decode, encode, request_dict
from kernelladder.verifier.contract.verdict import Verdict, fault_verdict, source_hash
from kernelladder.verifier.host import keeper
from kernelladder.verifier.host.gpu_arbiter import GpuArbiter
from kernelladder.verifier.host.local_transport import KEPT_NOTE, LocalTransport
from kernelladder.verifier.host.stage_grants import ProgressFn, StageGrants
from kernelladder.verifier.host.transport import Transport, signal_text
from kernelladder.verifier.host.transport import within as _within
from kernelladder.verifier.host.verdict_check import forged_verdict, forgery, quiet_after

DEFAULT_TIMEOUT_S = 300.0
START_TIMEOUT_S = 180.0  # torch import + CUDA context (+ Triton warm-up) on a cold box
KEPT_PONG_TIMEOUT_S = 5.0  # a worker taken from the keeper answers a ping within this
IDLE_TIMEOUT_S = 5.0  # a worker handed to the keeper drops its cached GPU memory within this


class WorkerUnavailable(Exception):
    """The worker could not be started or answered nonsense: not the candidate's fault."""


def _op_label(op: Any) -> str:
    if isinstance(op, str):
        return op
    if isinstance(op, Mapping):
        return str(op.get("name") or "kernelbench")
    return str(op)


class WorkerClient:
    """One worker, verified against one candidate at a time; replaced when it dies."""

    def __init__(
        self,
        transport_factory: Callable[[], Transport],
        *,
        secrets: Iterable[str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        stderr_lines: int = 40,
        on_stderr: Callable[[str], None] | None = None,
        arbiter: GpuArbiter | None = None,
    ):
        self._factory = transport_factory
        # the GPU this worker shares with others (a pipelined verification asks it for
        # the GPU per stage); None: every stage is granted at once
        self.arbiter = arbiter
        self._stages = StageGrants(arbiter)
        self.redactor = Redactor(secret_values() if secrets is None else secrets)
        self.start_timeout_s = start_timeout_s
        self.on_stderr = on_stderr
        self._transport: Transport | None = None
        self._hello: dict[str, Any] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._drain_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.workers_started = 0  # spawned by this client
        self.workers_taken = 0  # taken from the keeper (kept from an earlier run)
        self._taken: LocalTransport | None = None  # to start before the factory's (adopt)
        self._ahead: LocalTransport | None = None  # spawned before the run (start_from)
        self._kept_now = False  # the worker now (or last) is one kept from an earlier run
        self._hello_line = b""  # the worker's hello as it said it (handed to the keeper)
        self._verifier_files: str | None = None  # the first worker's hash of them

    # --- life cycle ---------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._transport is not None and self._hello is not None

    async def hello(self) -> dict[str, Any]:
        """The running worker's hello line (starting one if needed)."""
        async with self._lock:
            await self._ensure_started()
            assert self._hello is not None
            return dict(self._hello)

    @property
    def worker_pid(self) -> int | None:
        transport = self._transport
        return transport.pid if isinstance(transport, LocalTransport) else None

    @property
    def kept_from_earlier(self) -> bool:
        """The worker running now was taken from the keeper, not started by this client."""
        return self.alive and self._kept_now

    def adopt(self, transport: LocalTransport) -> None:
        """The next start uses this transport (a worker taken from the keeper) before the
        factory's; one that does not say its hello or answer a ping is replaced."""
        self._taken = transport

    def start_from(self, transport: LocalTransport) -> None:
        """The next start uses this worker started ahead of the run (pool.start_ahead):
        one taken from the keeper as adopt() does, one spawned ahead as if spawned now."""
        if transport.kept_ahead:
            self._taken = transport
        else:
            self._ahead = transport

    async def _ensure_started(self) -> None:
        if self.alive:
            return
        await self._discard()
        taken, self._taken = self._taken, None
        if taken is not None and await self._start_taken(taken):
            return
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            await self._start(ahead)
            return
        # Not through the GPU's arbiter: a worker that replaces a crashed one mid-run
        # would hold back every timing on its GPU for its whole start (seconds, after
        # each crash); its few warm-up kernels are tiny (docs/VERIFIER.md: what the pipeline
        # does not wall off).
        await self._start(self._factory())

    async def _start_taken(self, transport: LocalTransport) -> bool:
        """A worker kept from an earlier run: its hello read as a new worker's, then a
        ping; False (it is killed, a new one starts) when either fails."""
        try:
            await self._start(transport, taken=True)
            if await self._exchange({"type": "ping"}, ("pong",), KEPT_PONG_TIMEOUT_S):
                return True
        except WorkerUnavailable:
            pass
        await self._discard()
        return False

    async def _start(self, transport: Transport, *, taken: bool = False) -> None:
        self._stderr_tail.clear()
        self._kept_now = taken
        try:
            await _within(transport.start(), self.start_timeout_s)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await transport.kill()
            raise WorkerUnavailable(
                self.redactor.redact(f"cannot start {transport.describe()}: {exc}")
            ) from None
        self._transport = transport
        self._drain_task = asyncio.ensure_future(self._drain_stderr(transport))
        if taken:
            self.workers_taken += 1
        else:
            self.workers_started += 1
        try:
            while True:
                line = await _within(transport.stdout.readline(), self.start_timeout_s)
                if not line:
                    code = await self._exit_code()
                    raise WorkerUnavailable(
                        f"{transport.describe()} exited before its hello "
                        f"({self._status_text(code)}): " + self._tail_text()
                    )
                with contextlib.suppress(ValueError):
                    msg = decode(line)
                    if msg.get("type") == "error":
                        raise WorkerUnavailable(
                            self.redactor.redact(str(msg.get("message"))) + " " + self._tail_text()
                        )
                    if msg.get("type") == "hello":
                        if msg.get("protocol") != PROTOCOL_VERSION:
                            raise WorkerUnavailable(
                                f"worker speaks protocol {msg.get('protocol')}, not {PROTOCOL_VERSION}"
                            )
                        self._check_verifier_files(msg.get("verifier_files"))
                        self._hello = self.redactor.redact_obj(msg)
                        self._hello_line = bytes(line)
                        return
        except TimeoutError:
            await self._discard()
            raise WorkerUnavailable(
                f"{transport.describe()} sent no hello within {self.start_timeout_s:.0f}s: "
                + self._tail_text()
            ) from None
        except WorkerUnavailable:
            await self._discard()
            raise

    def _status_text(self, code: int | None) -> str:
        text = signal_text(code)
        return f"{text}: {KEPT_NOTE}" if code is None and self._kept_now else text

    async def _exchange(
        self, message: dict[str, Any], answers: tuple[str, ...], timeout: float
    ) -> dict[str, Any] | None:
        """Send `message` with a new id; the worker's answer to it of one of the `answers`
        types, or None: gone, or silent for `timeout`."""
        transport = self._transport
        if transport is None:
            return None
        req_id = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            transport.stdin.write(encode({**message, "id": req_id}))
            await _within(transport.stdin.drain(), timeout)
            while True:
                line = await _within(transport.stdout.readline(), max(0.01, deadline - loop.time()))
                if not line:
                    return None
                with contextlib.suppress(ValueError):
                    msg = decode(line)
                    if msg.get("id") == req_id and msg.get("type") in answers:
                        return msg
        except Exception:
            return None

    def _check_verifier_files(self, digest: Any) -> None:
        """A later worker must load the verifier the first one loaded: after a change on
        disk (a candidate's, where the walls were off) no new worker is trusted."""
        if not isinstance(digest, str):
            return
        if self._verifier_files is None:
            self._verifier_files = digest
        elif digest != self._verifier_files:
            raise WorkerUnavailable(
                "the verifier's files changed on disk since this run's first worker started "
                "(a candidate may have altered them): restore them, then start again"
            )

    async def _drain_stderr(self, transport: Transport) -> None:
        reader = transport.stderr
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # an over-long line: asyncio dropped it, carry on
                line = b"[an over-long stderr line was dropped]\n"
            except Exception:
                return
            if not line:
                return
            text = self.redactor.redact(line.decode("utf-8", errors="replace").rstrip("\n"))
            self._stderr_tail.append(text[:2000])
            if self.on_stderr is not None:
                with contextlib.suppress(Exception):
                    self.on_stderr(text)

    def _tail_text(self, n: int = 8) -> str:
        lines = list(self._stderr_tail)[-n:]
        return " | ".join(lines) if lines else "(no stderr)"

    async def _exit_code(self) -> int | None:
        if self._transport is None:
            return None
        try:
            return await _within(self._transport.wait(), 5)
        except Exception:
            return None

    async def _discard(self) -> None:
        transport, self._transport, self._hello = self._transport, None, None
        self._stages.baselines_done(compiled=False)  # gone: what it compiled alone may not be done
        if transport is not None:
            with contextlib.suppress(Exception):
                await transport.kill()
        if self._drain_task is not None:
            task, self._drain_task = self._drain_task, None
            with contextlib.suppress(Exception):
                await _within(task, 2)
            task.cancel()

    async def close(self) -> None:
        async with self._lock:
            for unstarted in (self._taken, self._ahead):  # never started: they go too
                if unstarted is not None:
                    with contextlib.suppress(Exception):
                        await unstarted.kill()
            self._taken = self._ahead = None
            if self._transport is not None and self._hello is not None:
                with contextlib.suppress(Exception):
                    self._transport.stdin.write(encode({"type": "shutdown"}))
                    await _within(self._transport.stdin.drain(), 2)
                    await _within(self._transport.wait(), 5)
            await self._discard()

    def keepable(self) -> bool:
        """An idle local worker (no request in flight) that the keeper could hold."""
        return (
            self.alive and not self._lock.locked() and isinstance(self._transport, LocalTransport)
        )

    async def hand_over(self, keep_s: float, cap: int, facts: dict[str, Any]) -> int | None:
        """Give the idle worker to the keeper (keeper.py) for the next run instead of
        shutting it down: its pid, or None when it is not kept (busy, gone, started from
        other verifier files than those on disk now, no keeper to be had), and close()
        shuts it down as before. `facts`: its transport's keeper_facts(), computed now.
        The worker first drops the GPU memory torch caches for it ("idle")."""
        if not self.keepable():
            return None
        async with self._lock:
            transport = self._transport
            if not isinstance(transport, LocalTransport) or not self.alive:
                return None
            with contextlib.suppress(ValueError):
                said = decode(self._hello_line).get("verifier_files")
                if said != facts.get("verifier_files"):
                    return None  # the verifier changed on disk since it started
                if not await self._exchange({"type": "idle"}, ("idled", "error"), IDLE_TIMEOUT_S):
                    return None
                drain, self._drain_task = self._drain_task, None
                if drain is not None:  # the keeper's copy of stderr is read by the next run
                    drain.cancel()
                    await asyncio.wait([drain])
                worker = {
                    **facts,
                    "gpu": (self._hello or {}).get("gpu"),
                    "hello": self._hello_line.decode("utf-8", errors="replace"),
                }
                try:
                    await asyncio.to_thread(
                        keeper.hand_over, worker, transport.pipe_fds(), keep_s=keep_s, cap=cap
                    )
                except Exception:  # no keeper to be had: close() shuts it down
                    self._drain_task = asyncio.ensure_future(self._drain_stderr(transport))
                    return None
                pid = transport.pid
                transport.release()
                self._transport, self._hello, self._hello_line = None, None, b""
                return pid
        return None

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- verify -------------------------------------------------------------------------
    async def prepare(self, op: Any, device: str, timeout_s: float = 300.0) -> dict[str, Any]:
        """The worker compiles an op's torch.compile baselines now, the GPU to itself (as a
        stage): {"seconds": s} or {"error": why}; a worker gone or silent is discarded."""
        async with self._lock:
            await self._ensure_started()
            transport, req_id, held = self._transport, uuid.uuid4().hex, []
            assert transport is not None
            deadline = asyncio.get_running_loop().time() + timeout_s
            try:
                msg: dict[str, Any] = {"type": "prepare", "id": req_id, "op": op, "device": device}
                transport.stdin.write(encode(msg))
                await _within(transport.stdin.drain(), 30)
                while msg.get("type") not in ("prepared", "error") or msg.get("id") != req_id:
                    left = max(0.01, deadline - asyncio.get_running_loop().time())
                    line = await _within(transport.stdout.readline(), left)
                    if not line:
                        raise ConnectionError("the worker exited")
                    try:
                        msg = decode(line)
                    except ValueError:
                        continue
                    if msg.get("type") == "stage" and msg.get("id") == req_id:
                        gpu = str(msg.get("gpu") or "none")
                        if await self._stages.grant(transport, req_id, "baselines", gpu, held, None, op=op) is None:  # fmt: skip
                            raise ConnectionError("the worker was gone")
                self._stages.baselines_done(compiled="error" not in msg)
                return {k: v for k, v in msg.items() if k not in ("type", "id")}
            except asyncio.CancelledError:
                await self._discard()
                raise
            except Exception as exc:
                await self._discard()
                return {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                self._stages.baselines_done(compiled=False)  # no-op once done
                self._stages.release(held)

    async def verify(
        self, request: Any, on_progress: ProgressFn | None = None, timeout_s: float | None = None
    ) -> Verdict:
        """A verdict for the candidate; raises only WorkerUnavailable (infrastructure)."""
        req = request_dict(request)
        timeout = float(timeout_s or req.pop("timeout_s", None) or DEFAULT_TIMEOUT_S)
        req.pop("timeout_s", None)
        fence_text = str(req.pop("fence", "") or "")
        fresh = bool(req.pop("fresh_worker", False))
        async with self._lock:
            if fresh:  # a re-measure wants a worker that has timed nothing yet
                await self._discard()
            try:
                return await self._verify_locked(req, on_progress, timeout, fence_text)
            except asyncio.CancelledError:
                # the worker may still be running this candidate: it cannot serve the next
                # one, so it goes (killed, with its process group) before the lock is freed
                await self._discard()
                raise

    async def _verify_locked(
        self, req: dict[str, Any], on_progress: ProgressFn | None, timeout: float, fence_text: str
    ) -> Verdict:
        loop = asyncio.get_running_loop()
        await self._ensure_started()  # bounded by start_timeout_s, not the candidate's time
        started = loop.time()
        transport = self._transport
        assert transport is not None
        source = str(req.get("source") or "")
        digest = source_hash(source)
        op, device = _op_label(req.get("op")), str(req.get("device") or "cpu")
        req_id = uuid.uuid4().hex
        message = {"type": "verify", "id": req_id, **req}
        message.setdefault("device", (self._hello or {}).get("device", "cpu"))
        message.setdefault("min_speedup", 1.0)
        message.setdefault("baselines", True)
        pipelined = bool(message.get("pipeline")) and self.arbiter is not None
        if pipelined:
            message["known"] = self.arbiter.facts.known(req.get("op"))
        elif self.arbiter is not None and self.arbiter.facts.rates_only():
            message["known"] = self.arbiter.facts.rates_only()
        self._stages.op_now = req.get("op") if pipelined else None
        where = {"gate": "load", "last": ""}  # the stage or gate running, its last line

        def fault(kind: str, detail: str, **evidence: Any) -> Verdict:
            evidence.setdefault("during", where["gate"])
            evidence.setdefault("stderr_tail", list(self._stderr_tail)[-20:])
            return fault_verdict(
                kind=kind,
                op=op,
                device=device,
                source_hash=digest,
                detail=self.redactor.redact(detail),
                fence=fence_text,
                evidence=self.redactor.redact_obj(evidence),
                elapsed_s=loop.time() - started,
            )

        try:
            transport.stdin.write(encode(message))
            await _within(transport.stdin.drain(), 30)
        except Exception:
            code = await self._exit_code()
            await self._discard()
            return fault(
                "crash",
                f"the worker was gone before the candidate was sent ({self._status_text(code)})",
            )

        deadline = started + timeout
        held: list[str] = []  # the GPU access this request holds now (at most one)
        try:
            verdict = await self._read_verdict(
                transport, req_id, digest, fault, on_progress, deadline, timeout, held, where
            )
        finally:
            self._stages.baselines_done(compiled=False)  # no-op once done
            self._stages.release(held)
        if self.arbiter is not None and verdict.device == "cuda":
            if pipelined:
                self.arbiter.facts.learn(req.get("op"), verdict)
            elif not self.arbiter.facts.rates:
                self.arbiter.facts.learn_rates(verdict)
        return verdict

    async def _read_verdict(
        self,
        transport: Transport,
        req_id: str,
        digest: str,
        fault: Any,
        on_progress: ProgressFn | None,
        deadline: float,
        timeout: float,
        held: list[str],
        where: dict[str, str],
    ) -> Verdict:
        """The worker's lines until its verdict (or its death, or the deadline); a stage
        line is answered once the GPU is this request's as it asks."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                line = await _within(transport.stdout.readline(), remaining)
            except TimeoutError:
                await self._discard()
                during = f" during {where['gate']}" + (
                    f" ({where['last']})" if where["last"] else ""
                )
                return fault(
                    "timeout",
                    f"no verdict within {timeout:g}s{during}; the worker was killed",
                    timeout_s=timeout,
                )
            except ValueError:  # a line beyond local_transport.STDOUT_LIMIT: not our worker's
                await self._discard()
                return fault("crash", "the worker wrote an over-long protocol line")
            if not line:
                code = await self._exit_code()
                await asyncio.sleep(0.05)  # let the stderr drain catch the last words
                await self._discard()
                detail = f"the worker died during {where['gate']} ({self._status_text(code)})"
                tail = self._tail_text(3)
                if tail != "(no stderr)":
                    detail += f": {tail[-300:]}"
                return fault("crash", detail, exit_code=code, signal=signal_text(code))
            try:
                msg = decode(line)
            except ValueError:
                continue
            if msg.get("id") != req_id:
                continue
            kind = msg.get("type")
            if kind == "stage":
                where["gate"], where["last"] = str(msg.get("stage") or where["gate"]), ""
                waited = await self._stages.grant(
                    transport, req_id, where["gate"], str(msg.get("gpu") or "none"), held,
                    on_progress,
                )  # fmt: skip
                if waited is None:
                    code = await self._exit_code()
                    await self._discard()
                    return fault(
                        "crash",
                        f"the worker was gone as its {where['gate']} stage began "
                        f"({self._status_text(code)})",
                    )
                deadline += waited  # waiting for the GPU is not the candidate's time
            elif kind == "progress":
                where["gate"] = str(msg.get("gate") or where["gate"])
                where["last"] = self.redactor.redact(str(msg.get("message") or ""))
                if on_progress is not None:
                    with contextlib.suppress(Exception):
                        on_progress(where["gate"], where["last"])
            elif kind == "error":
                await self._discard()
                return fault("crash", f"the worker rejected the request: {msg.get('message')}")
            elif kind == "verdict":
                self._stages.baselines_done()  # past its baselines' stage, if it had one
                return await self._accept(msg, req_id, digest, fault)

    async def _accept(self, msg: dict[str, Any], req_id: str, digest: str, fault: Any) -> Verdict:
        """Check the verdict line really came from the verifier, then return it."""
        try:
            verdict = Verdict.from_dict(self.redactor.redact_obj(msg["verdict"]))
        except Exception as exc:
            await self._discard()
            return fault("crash", f"unreadable verdict from the worker: {type(exc).__name__}")
        recycle = bool(msg.get("recycle"))
        forged = forgery(verdict, digest, recycle)
        if not forged and not recycle:
            assert self._transport is not None
            forged = await quiet_after(self._transport, req_id)
        if forged:
            await self._discard()
            return forged_verdict(verdict, forged, digest)
        if recycle:
            await self._exit_code()
            await self._discard()
        elif msg.get("retire"):  # the candidate's own operators die with this worker
            await self._discard()
        return verdict


def verify_sync(
    request: Any,
    *,
    device: str | None = None,
    timeout_s: float | None = None,
    on_progress: ProgressFn | None = None,
    secrets: Iterable[str] | None = None,
    **transport_options: Any,
) -> Verdict:
    """One candidate through a fresh local worker, from synchronous code."""
    req = request_dict(request)
    dev = device or str(req.get("device") or "cpu")
    req.setdefault("device", dev)

    async def _run() -> Verdict:
        client = WorkerClient(lambda: LocalTransport(dev, **transport_options), secrets=secrets)
        try:
            return await client.verify(req, on_progress=on_progress, timeout_s=timeout_s)
        finally:
            await client.close()

    return asyncio.run(_run())
