"""A verifier worker on this machine: spawned here, forked by its recipe's template
(worker_template.py), or taken from the keeper (keeper.py).

`LocalTransport.start()` has the worker forked by the template of its recipe when one
listens, else spawns it with subprocess.Popen (scrubbed env, its own scratch directory
as HOME, TMPDIR and cwd, its own session, memory limits), and wraps its pipes into
asyncio streams; asyncio's own subprocess transport would kill the child when it is
closed or collected, and a worker handed to the keeper must outlive its run. A forked
worker is the template's child: its template reaps it and says its exit status.

A worker taken from the keeper (`adopt`) is reached over the descriptors the keeper
sent; its stdout stream starts with the hello line it said when it started, so the
client reads that hello as it would a new worker's. It is not this process's child:
its exit status cannot be known (wait() returns None), kill() signals its process group
and polls until it is gone.

`recipe()` is what makes two workers interchangeable: only a worker started from the
same recipe (the verifier's files on disk as they are now included) is ever taken.

Standard library only (the engine and the CLI import it; it imports no torch).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from kernelladder.verifier.contract import source_files
from kernelladder.verifier.contract.env import worker_env
from kernelladder.verifier.contract.protocol import WORKER_MODULE
from kernelladder.verifier.contract.sandbox import mode_from_env, set_limits
from kernelladder.verifier.contract.scratch import (
    add_owner,
    make_scratch,
    owner_alive,
    process_start_time,
    sweep_stale,
)
from kernelladder.verifier.host import keeper, worker_template
from kernelladder.verifier.host.transport import within

STDOUT_LIMIT = 64 * 1024 * 1024  # a verdict line with evidence can be long
CPU_ADDRESS_SPACE = 24 * 1024**3  # RLIMIT_AS for CPU workers (CUDA needs far more VA)
KEPT_NOTE = "a worker kept from an earlier run"
_SCRATCH_STANDIN = "/kl-scratch-of-this-worker"  # where the recipe leaves the scratch out
RECIPE_VERSION = 1


def package_root() -> str:
    import kernelladder

    return os.path.dirname(os.path.dirname(os.path.abspath(kernelladder.__file__)))


def verifier_files(root: str) -> str:
    """The hash a worker importing kernelladder from `root` would say in its hello."""
    return source_files.combined(source_files.snapshot(os.path.join(root, "kernelladder")))


class LocalTransport:
    """A worker process on this machine: scrubbed env, own temp dir, own session."""

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
        self.kept_from_earlier = False  # taken from the keeper, not started here
        self._proc: subprocess.Popen[bytes] | None = None  # None for a taken worker
        self._pid: int | None = None
        self._start_time: int | None = None
        self._home: str | None = None
        self._pipes: list[asyncio.BaseTransport] = []
        self._fds: list[int] = []  # stdin's write end, stdout's and stderr's read ends
        self._taken: tuple[dict[str, Any], list[int]] | None = None  # adopted, not started
        self._files: list[Any] = []  # spawned or forked, not connected yet: its pipes
        self._template: str | None = None  # forked: the socket of the template it came from
        self._exit_status: tuple[int | None] | None = None  # forked: as its template said

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def home(self) -> str | None:
        """The worker's scratch directory (its HOME, TMPDIR and cwd) while it runs."""
        return self._home

    # --- the recipe ---------------------------------------------------------------------
    def _root(self) -> str:
        return self.package_root or package_root()

    def _command(self, home: str) -> tuple[list[str], dict[str, str]]:
        """The worker's argv and environment, its scratch directory being `home`."""
        extra = dict(self.extra_env)
        # the package root first, once: a caller whose PYTHONPATH names it already starts
        # workers of the same recipe as one whose does not
        root, path = self._root(), self.environ.get("PYTHONPATH", "")
        entries = [root, *(p for p in path.split(os.pathsep) if p and p != root)]
        extra["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))
        if self.cuda_device is not None:
            # index into the caller's visible GPUs, if it restricted them
            visible = [v.strip() for v in self.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
            visible = [v for v in visible if v]
            index = self.cuda_device
            extra["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
        env = worker_env(home, self.environ, extra)
        args = [self.python, "-m", WORKER_MODULE, "--device", self.device]
        args += ["--scratch", home, "--sandbox", self.sandbox or mode_from_env(self.environ)]
        if self.gpu_memory_fraction:
            args += ["--gpu-memory-fraction", str(self.gpu_memory_fraction)]
        return args, env

    def recipe(self) -> dict[str, Any]:
        """Everything that makes two workers interchangeable: the interpreter, the argv
        and environment less what is the worker's own (its scratch directory and what is
        derived from it), where kernelladder is imported from and its verifier's files as
        they are on disk now, the device, the limits and the sandbox."""
        args, env = self._command(_SCRATCH_STANDIN)
        return {
            "version": RECIPE_VERSION,
            "uid": os.getuid(),
            "python": self.python,
            "args": [a for a in args[1:] if a != _SCRATCH_STANDIN and a != "--scratch"],
            "env": {k: v for k, v in sorted(env.items()) if _SCRATCH_STANDIN not in v},
            "package_root": self._root(),
            "device": self.device,
            "cuda_device": self.cuda_device,
            "memory_limit_bytes": self.memory_limit_bytes,
            "gpu_memory_fraction": self.gpu_memory_fraction,
            "sandbox": self.sandbox or mode_from_env(self.environ),
            "verifier_files": verifier_files(self._root()),
        }

    def recipe_key(self, recipe: Mapping[str, Any] | None = None) -> str:
        recipe = self.recipe() if recipe is None else recipe
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()

    # --- life cycle ---------------------------------------------------------------------
    def adopt(self, worker: Mapping[str, Any], fds: list[int]) -> None:
        """Start from a worker taken from the keeper (its metadata and its three
        descriptors, now this transport's) instead of spawning one."""
        self._taken = (dict(worker), list(fds))

    async def start(self) -> None:
        if self._taken is not None:
            await self._start_taken()
            return
        if self._pid is None:
            # the dirs of workers (or callers) killed with SIGKILL go before this one is made
            await asyncio.to_thread(sweep_stale)
            template = self._template_path()
            await self._template_up(template)
            self._spawn(template)
        files, self._files = self._files, []
        assert len(files) == 3
        await self._connect(*files)

    def spawn_ahead(self) -> None:
        """Spawn the worker now, before any event loop runs (the CLI, before it imports
        torch: the worker's start overlaps the caller's); start() then only connects its
        pipes. Raises OSError when it cannot be spawned."""
        if self._pid is None and self._taken is None:
            sweep_stale()
            self._spawn(self._template_path())

    @property
    def kept_ahead(self) -> bool:
        """Taken from the keeper (adopt) and not started yet."""
        return self._taken is not None

    def _spawn(self, template: tuple[str, dict[str, Any]] | None) -> None:
        """Fork the worker from `template` (its socket and the recipe: _template_path)
        when it listens, else spawn it."""
        keeper.reap_disowned()  # workers this process handed to the keeper, since gone
        self._home = make_scratch(sweep=False)  # owned by this process until the spawn
        args, env = self._command(self._home)
        if template is not None and self._fork_from_template(template, args, env):
            return
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self._home,
            env=env,
            start_new_session=True,
            preexec_fn=functools.partial(set_limits, self.memory_limit_bytes),
            bufsize=0,
        )
        self._pid = self._proc.pid
        self._start_time = process_start_time(self._pid)
        self._files = [self._proc.stdin, self._proc.stdout, self._proc.stderr]
        add_owner(self._home, self._pid)  # kept while either of us lives

    def _template_path(self) -> tuple[str, dict[str, Any]] | None:
        """Where this worker's template listens, and its recipe; None: templates are off
        for it, or it is not a worker of the worker module (a template makes no other)."""
        args, _ = self._command(_SCRATCH_STANDIN)
        if args[1:3] != ["-m", WORKER_MODULE]:
            return None
        if not worker_template.enabled(self.device, self.environ):
            return None
        recipe = self.recipe()
        return worker_template.socket_for(self.recipe_key(recipe)), recipe

    async def _template_up(self, template: tuple[str, dict[str, Any]] | None) -> None:
        """Before an event loop's start: when no template of this worker's recipe
        listens, one is started and awaited (its imports are the ones this worker would
        have made; worker_template.START_WAIT_S at most), so the worker is forked."""
        if template is None or worker_template.listens(template[0]):
            return
        path, limit = template[0], self.memory_limit_bytes
        proc = worker_template.start(path, self.python, self.device, self._command, limit)
        await worker_template.until_up(path, proc)

    def _fork_from_template(
        self, template: tuple[str, dict[str, Any]], args: list[str], env: dict[str, str]
    ) -> bool:
        """The worker forked by its recipe's template (worker_template.py), its imports
        already made. False when none listens: it is then to be spawned, and (spawned
        ahead, before the caller's own imports, no event loop yet) a template is started
        for the next workers."""
        assert self._home is not None
        path, recipe = template
        forked = worker_template.fork(
            path,
            args[3:],  # after `python -m kernelladder.verifier.worker`
            env,
            self._home,
            memory_limit=self.memory_limit_bytes,
            verifier_files=recipe["verifier_files"],
        )
        if forked is None:
            limit = self.memory_limit_bytes
            worker_template.start(path, self.python, self.device, self._command, limit)
            return False
        self._template = forked.path
        self._pid, self._start_time, self._files = forked.pid, forked.start_time, forked.files
        add_owner(self._home, self._pid)
        return True

    def discard_ahead(self) -> None:
        """A worker started ahead that no pool claimed goes, now and without a loop: its
        process group killed, its pipes closed, its scratch directory removed."""
        pid = self._signal_kill()
        if self._proc is not None:
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=10)
            for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                with contextlib.suppress(Exception):
                    pipe.close()  # type: ignore[union-attr]
        elif pid is not None:  # taken or forked: not ours to wait for, so polled
            for pipe in self._files:
                with contextlib.suppress(Exception):
                    pipe.close()
            deadline = time.monotonic() + 10
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.01)
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    def _signal_kill(self) -> int | None:
        """SIGKILL to the worker's process group (candidate children too) while its pid
        still names it; a taken worker never started is this transport's first. Its pid."""
        if self._taken is not None:  # adopted, never started: it goes all the same
            for pipe in self._take_over():
                pipe.close()
        pid = self._pid
        if pid is not None and self._still_ours():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            if self._proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
        return pid

    def _take_over(self) -> list[Any]:
        """A taken worker becomes this transport's: its pid, scratch and pipes."""
        assert self._taken is not None
        worker, fds = self._taken
        self._taken = None
        self._pid = int(worker["pid"])
        start = worker.get("start_time")
        self._start_time = int(start) if start is not None else None
        self._home = str(worker.get("home") or "") or None
        self.kept_from_earlier = True
        modes = ("wb", "rb", "rb")
        return [os.fdopen(fd, mode, buffering=0) for fd, mode in zip(fds, modes, strict=True)]

    async def _start_taken(self) -> None:
        hello = str((self._taken or ({}, []))[0].get("hello") or "")
        files = self._take_over()
        if self._home:  # its sweeper never takes a live worker's directory
            add_owner(self._home, os.getpid())
        line = hello.encode() if hello.endswith("\n") else hello.encode() + b"\n"
        await self._connect(*files, first_line=line)

    async def _connect(self, stdin: Any, stdout: Any, stderr: Any, first_line: bytes = b"") -> None:
        loop = asyncio.get_running_loop()
        self._fds = [stdin.fileno(), stdout.fileno(), stderr.fileno()]
        readers = []
        for pipe, head in ((stdout, first_line), (stderr, b"")):
            reader = asyncio.StreamReader(limit=STDOUT_LIMIT, loop=loop)
            if head:
                reader.feed_data(head)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            transport, _ = await loop.connect_read_pipe(lambda p=protocol: p, pipe)
            self._pipes.append(transport)
            readers.append(reader)
        writer_transport, writer_protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop=loop), stdin
        )
        self._pipes.append(writer_transport)
        self.stdin = asyncio.StreamWriter(writer_transport, writer_protocol, None, loop)
        self.stdout, self.stderr = readers

    def _alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and owner_alive(self._pid, self._start_time)

    def _still_ours(self) -> bool:
        """The pid (and its process group) still names this worker, alive or a zombie:
        not reaped yet (a child of ours), or the same start time (one taken)."""
        if self._proc is not None:
            return self._proc.returncode is None
        start = process_start_time(self._pid) if self._pid is not None else None
        if self._start_time is None or start is None:
            return self._pid is not None and owner_alive(self._pid, None)
        return start == self._start_time

    async def _gone(self) -> None:
        while self._alive():
            await asyncio.sleep(0.01)

    def _close_pipes(self) -> None:
        pipes, self._pipes, self._fds = self._pipes, [], []
        for pipe in pipes:
            with contextlib.suppress(Exception):
                pipe.close()

    async def kill(self) -> None:
        pid = self._signal_kill()
        if pid is not None:
            with contextlib.suppress(Exception):
                await within(self._gone(), 10)
                await within(self._reaped(), 5)
        self._close_pipes()
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    async def wait(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal): a forked
        worker's as its template tells; None for a worker taken from the keeper (not this
        process's child: no status to read)."""
        if self._pid is None:
            return None
        await self._gone()
        if self._home:  # the worker is gone: its scratch directory goes with it
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        if self._proc is None:
            return await self._reaped()
        return self._proc.returncode

    async def _reaped(self) -> int | None:
        """A forked worker's exit status, once its template has reaped it (a zombie no
        more, as a spawned worker is once polled); None for any other worker."""
        if self._proc is not None or self._template is None or self._pid is None:
            return None
        if self._exit_status is None:
            path, pid = self._template, self._pid
            self._exit_status = (await asyncio.to_thread(worker_template.exit_status, path, pid),)
        return self._exit_status[0]

    # --- handed to the keeper -----------------------------------------------------------
    def keeper_facts(self) -> dict[str, Any]:
        """What the keeper is told of this worker: its recipe (computed now: with the
        verifier's files as they are on disk now, also given apart), pid, scratch."""
        recipe = self.recipe()
        return {
            "recipe": self.recipe_key(recipe),
            "verifier_files": recipe["verifier_files"],
            "pid": self._pid,
            "start_time": self._start_time,
            "home": self._home,
            "device": self.device,
            "cuda_device": self.cuda_device,
        }

    def pipe_fds(self) -> list[int]:
        """The worker's stdin (write end), stdout and stderr (read ends), as held here."""
        return list(self._fds)

    def release(self) -> None:
        """The keeper holds the worker now: this side's pipes close, the process lives."""
        self._close_pipes()
        if self._proc is not None:
            keeper.disown(self._proc)
        self._proc, self._pid, self._home, self._template = None, None, None, None

    def describe(self) -> str:
        where = f"cuda:{self.cuda_device}" if self.cuda_device is not None else self.device
        kept = f", {KEPT_NOTE}" if self.kept_from_earlier else ""
        return f"local worker ({where}, pid {self.pid}{kept})"
