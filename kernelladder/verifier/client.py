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
import hashlib
import os
import resource
import shutil
import signal
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kernelladder.verifier.env import Redactor, secret_values, worker_env
from kernelladder.verifier.gpu_arbiter import EXCLUSIVE, SHARED, GpuArbiter
from kernelladder.verifier.protocol import PROTOCOL_VERSION, WORKER_MODULE, decode, encode
from kernelladder.verifier.sandbox import mode_from_env
from kernelladder.verifier.scratch import add_owner, make_scratch, sweep_stale
from kernelladder.verifier.verdict import FAIL, Feedback, GateResult, Verdict, fault_verdict

ProgressFn = Callable[[str, str], None]
DEFAULT_TIMEOUT_S = 300.0
START_TIMEOUT_S = 180.0  # torch import + CUDA context (+ Triton warm-up) on a cold box
PONG_TIMEOUT_S = 15.0
STDOUT_LIMIT = 64 * 1024 * 1024  # a verdict line with evidence can be long
CPU_ADDRESS_SPACE = 24 * 1024**3  # RLIMIT_AS for CPU workers (CUDA needs far more VA)


async def _within(awaitable: Any, timeout: float) -> Any:
    """Await with a deadline. Unlike asyncio.wait_for on Python 3.11, a cancellation that
    lands as the awaited read completes is never swallowed (a stopped run must stop)."""
    async with asyncio.timeout(timeout):
        return await awaitable


class WorkerUnavailable(Exception):
    """The worker could not be started or answered nonsense: not the candidate's fault."""


class Transport(Protocol):
    """How a worker process is reached. After `start()`: `stdin` has write(bytes) and
    async drain(); `stdout` and `stderr` have async readline()."""

    stdin: Any
    stdout: Any
    stderr: Any

    async def start(self) -> None: ...

    async def kill(self) -> None:
        """Kill the whole worker (process group / remote process); idempotent."""
        ...

    async def wait(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal)."""
        ...

    def describe(self) -> str: ...


def _package_root() -> str:
    import kernelladder

    return os.path.dirname(os.path.dirname(os.path.abspath(kernelladder.__file__)))


class LocalTransport:
    """A worker subprocess on this machine: scrubbed env, own temp dir, own session."""

    def __init__(
        self,
        device: str = "cpu",
        *,
        python: str = sys.executable,
        environ: Mapping[str, str] | None = None,
        cuda_device: int | None = None,
        memory_limit_bytes: int | None = None,
        gpu_memory_fraction: float | None = None,
        extra_env: Mapping[str, str] | None = None,
        sandbox: str | None = None,
        package_root: str | None = None,
    ):
        self.device = device
        self.sandbox = sandbox  # None: the caller's KERNELLADDER_SANDBOX, else auto
        self.package_root = package_root  # where the worker imports kernelladder from
        self.python = python
        self.environ = dict(os.environ if environ is None else environ)
        self.cuda_device = cuda_device
        self.memory_limit_bytes = (
            memory_limit_bytes
            if memory_limit_bytes is not None
            else (CPU_ADDRESS_SPACE if device == "cpu" else None)
        )
        self.gpu_memory_fraction = gpu_memory_fraction
        self.extra_env = dict(extra_env or {})
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        self._proc: asyncio.subprocess.Process | None = None
        self._home: str | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def home(self) -> str | None:
        """The worker's scratch directory (its HOME, TMPDIR and cwd) while it runs."""
        return self._home

    async def start(self) -> None:
        # the dirs of workers (or callers) killed with SIGKILL go before this one is made
        await asyncio.to_thread(sweep_stale)
        self._home = make_scratch(sweep=False)  # owned by this process until the spawn
        extra = dict(self.extra_env)
        root = self.package_root or _package_root()
        path = self.environ.get("PYTHONPATH", "")
        extra["PYTHONPATH"] = root + (os.pathsep + path if path else "")
        if self.cuda_device is not None:
            # index into the caller's visible GPUs, if it restricted them
            visible = [v.strip() for v in self.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
            visible = [v for v in visible if v]
            index = self.cuda_device
            extra["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
        env = worker_env(self._home, self.environ, extra)
        args = [self.python, "-m", WORKER_MODULE, "--device", self.device]
        args += ["--scratch", self._home, "--sandbox", self.sandbox or mode_from_env(self.environ)]
        if self.gpu_memory_fraction:
            args += ["--gpu-memory-fraction", str(self.gpu_memory_fraction)]
        limit = self.memory_limit_bytes

        def _limits() -> None:  # runs in the child between fork and exec
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self._proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._home,
            env=env,
            start_new_session=True,
            preexec_fn=_limits,
            limit=STDOUT_LIMIT,
        )
        add_owner(self._home, self._proc.pid)  # kept while either of us lives
        self.stdin, self.stdout, self.stderr = (
            self._proc.stdin,
            self._proc.stdout,
            self._proc.stderr,
        )

    async def kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the whole session: candidate children too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc is not None:
            with contextlib.suppress(Exception):
                await _within(proc.wait(), 10)
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    async def wait(self) -> int | None:
        if self._proc is None:
            return None
        code = await self._proc.wait()
        if self._home:  # the worker is gone: its scratch directory goes with it
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        return code

    def describe(self) -> str:
        where = f"cuda:{self.cuda_device}" if self.cuda_device is not None else self.device
        return f"local worker ({where}, pid {self.pid})"


def request_dict(request: Any) -> dict[str, Any]:
    """A verify request as a dict (accepts a dict or a VerifyRequest-like object)."""
    if isinstance(request, Mapping):
        return dict(request)
    keys = (
        "op", "source", "device", "min_speedup", "timeout_s", "suite", "baselines", "seeds",
        "paired_rounds", "pair_every_shape", "paired_min_rounds", "fresh_worker", "unseen_shapes", "unseen_seed",
        "pipeline", "early_stop",
    )  # fmt: skip
    return {k: getattr(request, k) for k in keys if hasattr(request, k)}


def _op_label(op: Any) -> str:
    if isinstance(op, str):
        return op
    if isinstance(op, Mapping):
        return str(op.get("name") or "kernelbench")
    return str(op)


def _signal_text(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


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
        self.redactor = Redactor(secret_values() if secrets is None else secrets)
        self.start_timeout_s = start_timeout_s
        self.on_stderr = on_stderr
        self._transport: Transport | None = None
        self._hello: dict[str, Any] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._drain_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.workers_started = 0
        self._verifier_files: str | None = None  # the first worker's hash of them
        self._op_now: Any = None  # the op of the pipelined request in flight

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

    async def _ensure_started(self) -> None:
        if self.alive:
            return
        await self._discard()
        # Not through the GPU's arbiter: a worker that replaces a crashed one mid-run
        # would hold back every timing on its GPU for its whole start (seconds, after
        # each crash); its few warm-up kernels are tiny (docs/VERIFIER.md: what the pipeline
        # does not wall off).
        transport = self._factory()
        self._stderr_tail.clear()
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
        self.workers_started += 1
        try:
            while True:
                line = await _within(transport.stdout.readline(), self.start_timeout_s)
                if not line:
                    code = await self._exit_code()
                    raise WorkerUnavailable(
                        f"{transport.describe()} exited before its hello ({_signal_text(code)}): "
                        + self._tail_text()
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
            if self._transport is not None and self._hello is not None:
                with contextlib.suppress(Exception):
                    self._transport.stdin.write(encode({"type": "shutdown"}))
                    await _within(self._transport.stdin.drain(), 2)
                    await _within(self._transport.wait(), 5)
            await self._discard()

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
                        if await self._grant_stage(transport, req_id, "baselines", gpu, held, None) is None:  # fmt: skip
                            raise ConnectionError("the worker was gone")
                return {k: v for k, v in msg.items() if k not in ("type", "id")}
            except asyncio.CancelledError:
                await self._discard()
                raise
            except Exception as exc:
                await self._discard()
                return {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                self._release_gpu(held)

    async def verify(
        self,
        request: Any,
        on_progress: ProgressFn | None = None,
        timeout_s: float | None = None,
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
        digest = hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()
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
        self._op_now = req.get("op") if pipelined else None
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
                "crash", f"the worker was gone before the candidate was sent ({_signal_text(code)})"
            )

        deadline = started + timeout
        held: list[str] = []  # the GPU access this request holds now (at most one)
        try:
            verdict = await self._read_verdict(
                transport, req_id, digest, fault, on_progress, deadline, timeout, held, where
            )
        finally:
            self._release_gpu(held)
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
            except ValueError:  # a line beyond STDOUT_LIMIT: not our worker's doing
                await self._discard()
                return fault("crash", "the worker wrote an over-long protocol line")
            if not line:
                code = await self._exit_code()
                await asyncio.sleep(0.05)  # let the stderr drain catch the last words
                await self._discard()
                detail = f"the worker died during {where['gate']} ({_signal_text(code)})"
                tail = self._tail_text(3)
                if tail != "(no stderr)":
                    detail += f": {tail[-300:]}"
                return fault("crash", detail, exit_code=code, signal=_signal_text(code))
            try:
                msg = decode(line)
            except ValueError:
                continue
            if msg.get("id") != req_id:
                continue
            kind = msg.get("type")
            if kind == "stage":
                where["gate"], where["last"] = str(msg.get("stage") or where["gate"]), ""
                waited = await self._grant_stage(
                    transport, req_id, where["gate"], str(msg.get("gpu") or "none"), held,
                    on_progress,
                )  # fmt: skip
                if waited is None:
                    code = await self._exit_code()
                    await self._discard()
                    return fault(
                        "crash",
                        f"the worker was gone as its {where['gate']} stage began "
                        f"({_signal_text(code)})",
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
                return await self._accept(msg, req_id, digest, fault)

    async def _grant_stage(
        self,
        transport: Transport,
        req_id: str,
        stage: str,
        gpu: str,
        held: list[str],
        on_progress: ProgressFn | None,
    ) -> float | None:
        """Give the worker the GPU for its next stage: what it held goes back, the new
        access is waited for (seconds waited returned), then "go". None: the worker is
        gone. A stage that needs no GPU is only reported."""
        self._release_gpu(held)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        if gpu in (SHARED, EXCLUSIVE):
            arbiter = self.arbiter
            if arbiter is not None and arbiter.busy_for(gpu) and on_progress is not None:
                alone = "to itself" if gpu == EXCLUSIVE else "beside other correctness runs"
                with contextlib.suppress(Exception):
                    on_progress(stage, f"waiting for the GPU ({alone})")
            if arbiter is not None:
                await arbiter.acquire(gpu)
            held.append(gpu)
            go: dict[str, Any] = {"type": "go", "id": req_id}
            if gpu == EXCLUSIVE and self._op_now is not None and self.arbiter is not None:
                # what other workers measured since the request was sent (the first
                # verdicts of a run come while the others wait to time their first)
                go["known"] = self.arbiter.facts.known(self._op_now)
            try:
                transport.stdin.write(encode(go))
                await _within(transport.stdin.drain(), 30)
            except Exception:
                return None
        return loop.time() - asked

    def _release_gpu(self, held: list[str]) -> None:
        """Give back the GPU access a request holds."""
        while held:
            mode = held.pop()
            if self.arbiter is not None:
                self.arbiter.release(mode)

    async def _accept(self, msg: dict[str, Any], req_id: str, digest: str, fault: Any) -> Verdict:
        """Check the verdict line really came from the verifier, then return it."""
        try:
            verdict = Verdict.from_dict(self.redactor.redact_obj(msg["verdict"]))
        except Exception as exc:
            await self._discard()
            return fault("crash", f"unreadable verdict from the worker: {type(exc).__name__}")
        recycle = bool(msg.get("recycle"))
        forged = ""
        if verdict.source_hash != digest:
            forged = "the verdict names another candidate"
        elif recycle and verdict.passed:
            forged = "a passing verdict from a worker that must recycle"
        if not forged and not recycle:
            forged = await self._confirm_quiet(req_id)
        if forged:
            await self._discard()
            return _forged_verdict(verdict, forged, digest)
        if recycle:
            await self._exit_code()
            await self._discard()
        return verdict

    async def _confirm_quiet(self, req_id: str) -> str:
        """Ping; a second verdict for the same request before the pong means forgery."""
        transport = self._transport
        assert transport is not None
        ping_id = uuid.uuid4().hex
        try:
            transport.stdin.write(encode({"type": "ping", "id": ping_id}))
            await _within(transport.stdin.drain(), PONG_TIMEOUT_S)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + PONG_TIMEOUT_S
            while True:
                line = await _within(transport.stdout.readline(), max(0.01, deadline - loop.time()))
                if not line:
                    return "the worker exited right after its verdict"
                with contextlib.suppress(ValueError):
                    msg = decode(line)
                    if msg.get("id") == req_id:
                        return "a second verdict line for the same request (forged protocol output)"
                    if msg.get("type") == "pong" and msg.get("id") == ping_id:
                        return ""
        except Exception:
            return "the worker stopped answering after its verdict"


def _forged_verdict(v: Verdict, why: str, digest: str) -> Verdict:
    detail = f"protocol tampering: {why}"
    return Verdict(
        verdict=FAIL,
        kind=FAIL,
        gate="anti-cheat",
        gates={"anti-cheat": GateResult(FAIL, detail, {"claimed": v.verdict})},
        op=v.op,
        device=v.device,
        source_hash=digest,
        feedback=Feedback(
            expected="the verifier's verdict, untouched", saw=detail, fence=v.feedback.fence
        ),
        flags=("protocol-tampering",),
        environment=v.environment,
    )


class LocalPool:
    """Local workers: one per GPU (or `size` CPU workers), or `per_gpu` of them sharing
    each GPU through its GpuArbiter (a pipelined verification compiles ahead in one
    while another times); verify() uses a free one."""

    def __init__(
        self,
        device: str = "cpu",
        size: int | None = None,
        *,
        secrets: Iterable[str] | None = None,
        per_gpu: int = 1,
        **transport_options: Any,
    ):
        if size is None:
            size = 1
        self.device = device
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
        hellos = list(await asyncio.gather(*(c.hello() for c in self.clients)))
        if self.device == "cuda":
            from kernelladder.verifier.calibration import GpuIdentity, driver_version

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
        await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)


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
