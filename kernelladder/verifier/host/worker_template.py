"""The caller's side of worker templates (verifier/worker/template.py): where a
recipe's template listens, starting one, and a worker forked from it.

A CPU worker spawned fresh spends seconds importing torch, triton and torch._dynamo
before it can say hello; a template has made those imports once and forks workers
that start where a fresh worker's imports end. A local transport asks the template of
its recipe (LocalTransport.recipe: interpreter, arguments, environment, the
verifier's files on disk now...) for a worker; when none listens it starts one and
forks the worker from it once it listens (the template's imports are the ones the
worker would have made itself: one start's worth of waiting, not two), or, for a
worker spawned ahead of the caller's own imports (no event loop yet), spawns it as
before and leaves the template to the next. A template that does not come within
START_WAIT_S, or fails, is not waited for again for RETRY_START_S.

On by default for CPU workers; KERNELLADDER_WORKER_TEMPLATE=0 turns templates off, =1
allows them for CUDA workers too (the template never touches the GPU; the worker
initialises CUDA after the fork, as a fresh one would). Templates live beside the
keeper's socket (keeper.socket_path), one per recipe, and exit after IDLE_S quiet.
Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernelladder.verifier.contract import private_socket
from kernelladder.verifier.contract.private_socket import SocketError
from kernelladder.verifier.contract.sandbox import set_limits
from kernelladder.verifier.contract.scratch import sweep_stale, write_marker
from kernelladder.verifier.host import keeper

TEMPLATE_ENV = "KERNELLADDER_WORKER_TEMPLATE"
TEMPLATE_MODULE = "kernelladder.verifier.worker.template"
WIRE_VERSION = 1
IDLE_S = 60.0  # a template with no worker alive and no request for this long exits
FORK_TIMEOUT_S = 5.0
RETRY_START_S = 30.0  # after a start, the same recipe's next workers do not start another
START_WAIT_S = 60.0  # a worker waits this long at most for its template's imports
SOCKET_PREFIX = "template-"

_started_at: dict[str, float] = {}  # socket path -> when this process last started one
_failed_at: dict[str, float] = {}  # socket path -> when a wait for its template failed
_lock = threading.Lock()


def enabled(device: str, environ: Mapping[str, str]) -> bool:
    """Whether workers of this device are forked from a template (see the module's doc)."""
    setting = environ.get(TEMPLATE_ENV, "").strip()
    if setting == "0":
        return False
    return device == "cpu" or setting == "1"


def socket_for(recipe_key: str) -> str:
    """Where the template of that recipe listens: beside the keeper's socket."""
    folder = os.path.dirname(keeper.socket_path())
    return os.path.join(folder, f"{SOCKET_PREFIX}{recipe_key[:24]}.sock")


@dataclass(frozen=True)
class Forked:
    """A worker a template forked: its pid and start time, and this side's pipe ends
    (its stdin's write end, its stdout's and stderr's read ends) as files."""

    path: str
    pid: int
    start_time: int | None
    files: list[Any]


def _request(
    path: str,
    op: str,
    fds: list[int] | tuple[()] = (),
    timeout: float = FORK_TIMEOUT_S,
    **fields: Any,
) -> dict[str, Any]:
    """One request to the template at `path` (SocketError, OSError when none answers)."""
    message = {"op": op, "version": WIRE_VERSION, **fields}
    answer, _ = private_socket.request(path, message, fds, timeout=timeout, who="worker template")
    return answer


def fork(
    path: str,
    argv: list[str],
    env: Mapping[str, str],
    cwd: str,
    *,
    memory_limit: int | None,
    verifier_files: str,
) -> Forked | None:
    """A worker forked by the template at `path`; None when there is none to ask (or it
    refused: files changed), and the caller spawns the worker itself."""
    ends = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr: (read, write)
    theirs = [ends[0][0], ends[1][1], ends[2][1]]
    ours = [ends[0][1], ends[1][0], ends[2][0]]
    try:
        answer = _request(
            path, "fork", theirs, argv=list(argv), env=dict(env), cwd=cwd,
            memory_limit=memory_limit, verifier_files=verifier_files,
        )  # fmt: skip
        pid = int(answer["pid"])
        start = answer.get("start_time")
    except (SocketError, OSError, KeyError, TypeError, ValueError):
        private_socket.close_fds(ours)
        return None
    finally:
        private_socket.close_fds(theirs)  # the worker holds its own copies now
    modes = ("wb", "rb", "rb")
    files = [os.fdopen(fd, mode, buffering=0) for fd, mode in zip(ours, modes, strict=True)]
    return Forked(path, pid, int(start) if start is not None else None, files)


def exit_status(path: str, pid: int, timeout: float = 5.0) -> int | None:
    """A forked worker's exit status (negative: the signal that killed it), asked of its
    template once it has exited; None when the template is gone or does not know it."""
    try:
        answer = _request(path, "wait", timeout=timeout, pid=int(pid))
    except (SocketError, OSError):
        return None
    status = answer.get("status")
    return int(status) if isinstance(status, int) else None


def start(
    path: str,
    python: str,
    device: str,
    command: Callable[[str], tuple[list[str], dict[str, str]]],
    memory_limit: int | None,
) -> subprocess.Popen[bytes] | None:
    """Start the template for `path` in the background (detached: its own session,
    stdio to /dev/null, the recipe's environment made by `command` for a directory of
    its own beside the socket, which it removes as it exits), unless this process
    started one there within RETRY_START_S. The process started now, if one was."""
    with _lock:
        if time.monotonic() - _started_at.get(path, -RETRY_START_S) < RETRY_START_S:
            return None
        _started_at[path] = time.monotonic()
        try:
            private_socket.check_supported(path)
            private_socket.private_dir(path, make=True)
        except (SocketError, OSError):
            return None
        sweep_homes(os.path.dirname(path))
        home = tempfile.mkdtemp(
            prefix=os.path.basename(path).removesuffix(".sock") + ".home-",
            dir=os.path.dirname(path),
        )
        _, env = command(home)  # the recipe's, its own directory as the workers' scratch
        args = [python, "-m", TEMPLATE_MODULE, "--device", device, "--socket", path]
        args += ["--home", home, "--idle-s", f"{IDLE_S:g}"]
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=home,
                env=env,
                start_new_session=True,
                preexec_fn=functools.partial(set_limits, memory_limit),  # as its workers
            )
        except OSError:
            shutil.rmtree(home, ignore_errors=True)
            return None
        with contextlib.suppress(OSError):  # a sweep takes it once the template is gone
            write_marker(home, [proc.pid])
        keeper.disown(proc)
        return proc


def sweep_homes(folder: str) -> list[str]:
    """Remove the directories of templates that are gone without removing their own (a
    template killed with SIGKILL), as stale worker scratch is swept: ours, real
    directories, whose marker names no live process (one without a marker only once a
    day old). The paths removed; never raises."""
    return sweep_stale(folder, named=_home_name)


def _home_name(name: str) -> bool:
    return name.startswith(SOCKET_PREFIX) and ".home-" in name  # start()'s mkdtemp


def listens(path: str) -> bool:
    """Whether a template listens at `path` (it answers a wait for no worker of its)."""
    if not os.path.exists(path):
        return False
    try:
        _request(path, "wait", pid=0)
    except (SocketError, OSError):
        return False
    return True


async def until_up(path: str, proc: subprocess.Popen[bytes] | None) -> bool:
    """Wait until the template at `path` listens: the one this process just started
    (`proc`), or another's that is starting. False when it does not within START_WAIT_S
    or `proc` failed; the recipe's workers are then spawned without waiting, for
    RETRY_START_S."""
    if time.monotonic() - _failed_at.get(path, -RETRY_START_S) < RETRY_START_S:
        return False
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if listens(path):
            return True
        code = _exit_code(proc)
        if code is not None and code != 0:  # 0: another template of the recipe won its lock
            break
        await asyncio.sleep(0.05)
    _failed_at[path] = time.monotonic()
    return False


def _exit_code(proc: subprocess.Popen[bytes] | None) -> int | None:
    """A started template's exit status, once it has exited (it is disowned: polled by pid)."""
    if proc is None:
        return None
    try:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped already (keeper.reap_disowned): not known
        return None
    if pid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def stop_all(folder: str | None = None) -> list[str]:
    """Stop every template listening beside the keeper's socket (or in `folder`): the
    sockets asked. Their workers live on."""
    folder = folder or os.path.dirname(keeper.socket_path())
    stopped = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            if name.startswith(SOCKET_PREFIX) and name.endswith(".sock"):
                path = os.path.join(folder, name)
                with contextlib.suppress(SocketError, OSError):  # gone already
                    _request(path, "stop", timeout=2.0)
                    stopped.append(path)
    return stopped
