"""A worker template: one process that has made a worker's imports (torch, triton,
torch._dynamo, the verifier: __main__.preload) and forks ready-imported workers on
request, so that a CPU worker starts in a fraction of a second instead of seconds.

    python -m kernelladder.verifier.worker.template --device cpu --socket PATH --idle-s N

It is started by the caller (verifier/host/worker_template.py) with exactly the
environment, limits and interpreter of the workers it will fork (their recipe), and
never runs a candidate or anything a request sends: a request names only the worker's
arguments, environment, directory and memory limit, and brings its three pipes. Each
worker it forks is what a fresh `python -m kernelladder.verifier.worker` would be once
its imports are done: its own session, its pipes on 0/1/2, the environment of its own
scratch directory, `random` reseeded, the signal dispositions of a fresh interpreter;
then the worker's main runs as it would there (sandbox, selftest, hello). The template
forks only while the verifier's files on disk are the ones it imported (and the caller
expects): otherwise it refuses and exits.

It listens on a private socket (contract/private_socket.py: this user's, with the
token) beside the keeper's, one template per recipe. Requests, one JSON line each way:
    fork {argv, env, cwd, memory_limit, verifier_files} + 3 fds -> {pid, start_time}
    wait {pid}   -> {status} once that worker has exited (negative: killed by that
                    signal; null: not a worker of this template)
    stop {}      -> {ok}; the template exits (its workers live on)
It exits after `--idle-s` seconds with no worker of its alive and no request, when its
caller's files changed, or on a stop. Single-threaded: it forks from its only thread.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hmac
import os
import random
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any

from kernelladder.verifier.contract import source_files
from kernelladder.verifier.contract.private_socket import (
    SocketError,
    close_fds,
    own_token,
    peer_uid,
    private_dir,
    receive_line,
    send_line,
)
from kernelladder.verifier.contract.sandbox import set_limits
from kernelladder.verifier.contract.scratch import process_start_time

WIRE_VERSION = 1
TICK_S = 0.1  # how often exited workers are reaped when nothing else happens
REQUEST_TIMEOUT_S = 2.0
STATUS_KEPT_S = 300.0  # an exited worker's status stays this long for a late `wait`
FDS_PER_WORKER = 3  # the worker's stdin (read end), stdout's and stderr's write ends


class Template:
    """The template's state: its token, the files it imported, its workers' statuses."""

    def __init__(self, token: str, files: dict[str, str], idle_s: float):
        self.token = token
        self.files = files
        self.files_hash = source_files.combined(files)
        self.idle_s = idle_s
        self.children: set[int] = set()
        self.statuses: dict[int, tuple[int, float]] = {}  # pid -> (exit code, when)
        self.waiting: dict[int, list[socket.socket]] = {}  # pid -> connections waiting
        self.last_activity = time.monotonic()
        self.stopping = False

    # --- requests ------------------------------------------------------------------------
    def answer(
        self, conn: socket.socket, message: dict[str, Any], fds: list[int], listener: Any
    ) -> dict[str, Any] | None:
        """The answer to one request (None: the connection waits for a worker's exit)."""
        if not hmac.compare_digest(str(message.get("token") or ""), self.token):
            return {"ok": False, "error": "a request without the template's token"}
        if message.get("version") != WIRE_VERSION:
            return {"ok": False, "error": f"wire version {message.get('version')!r} unknown"}
        op = message.get("op")
        self.last_activity = time.monotonic()
        if op == "fork":
            return self._fork(message, fds, [listener, conn])
        if op == "wait":
            pid = message.get("pid")
            if not isinstance(pid, int) or (pid not in self.children and pid not in self.statuses):
                return {"ok": True, "status": None}
            if pid in self.statuses:
                return {"ok": True, "status": self.statuses[pid][0]}
            self.waiting.setdefault(pid, []).append(conn)
            return None
        if op == "stop":
            self.stopping = True
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _fork(self, message: dict[str, Any], fds: list[int], inherited: list[Any]) -> dict:
        if len(fds) != FDS_PER_WORKER:
            return {"ok": False, "error": "a fork needs the worker's three pipes"}
        if message.get("verifier_files") != self.files_hash or source_files.changed(self.files):
            self.stopping = True  # a new template of the files as they are now is the caller's
            return {"ok": False, "stale": True, "error": "the verifier's files changed"}
        try:
            argv = [str(a) for a in message["argv"]]
            env = {str(k): str(v) for k, v in dict(message["env"]).items()}
            cwd = str(message["cwd"])
            limit = message.get("memory_limit")
            limit = int(limit) if limit else None
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": f"a malformed fork request: {exc!r}"}
        _flush_std()
        with warnings.catch_warnings():  # torch's own thread: its pools reset in the child
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the worker
            _become_worker(argv, env, cwd, limit, fds, [*inherited, *self._open_conns()])
        self.children.add(pid)
        return {"ok": True, "pid": pid, "start_time": process_start_time(pid)}

    def _open_conns(self) -> list[socket.socket]:
        return [c for conns in self.waiting.values() for c in conns]

    # --- workers' exits ------------------------------------------------------------------
    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            self.statuses[pid] = (code, time.monotonic())
            self.last_activity = time.monotonic()
            for conn in self.waiting.pop(pid, []):
                with conn, contextlib.suppress(OSError):
                    send_line(conn, {"ok": True, "status": code})
        old = time.monotonic() - STATUS_KEPT_S
        self.statuses = {p: s for p, s in self.statuses.items() if s[1] > old}

    def done(self) -> bool:
        if self.stopping:
            return True
        quiet = not self.children and not self.waiting
        return quiet and time.monotonic() - self.last_activity > self.idle_s


def _become_worker(
    argv: list[str], env: dict[str, str], cwd: str, limit: int | None, fds: list[int], inherited
) -> None:
    """In the forked child: a fresh worker's surroundings, then the worker's main. Never
    returns."""
    code = 70
    try:
        for sock in inherited:  # no finalizer of the template's sockets closes a worker's fd
            with contextlib.suppress(OSError):
                sock.detach()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # inheritable, like a spawned worker's stdio
        # nothing of the template's stays open (its socket, connections, lock), as a
        # spawned worker has only its stdio
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # read again from this worker's TMPDIR
        random.seed()  # not the template's sequence, shared by every worker it forks
        set_limits(limit)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from kernelladder.verifier.worker import __main__ as worker

        sys.argv = [worker.__file__, *argv]
        code = worker.main(argv)
        worker._exit(code)
    except BaseException:  # noqa: BLE001 (the worker must not fall back into the template)
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            _flush_std()
    os._exit(code)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _lock(folder: str, path: str) -> int | None:
    """This socket's lock, held for the template's life; None when another holds it."""
    lock_path = path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _serve_one(template: Template, conn: socket.socket, listener: socket.socket) -> None:
    conn.settimeout(REQUEST_TIMEOUT_S)
    fds: list[int] = []
    try:
        if peer_uid(conn) != os.getuid():
            conn.close()
            return
        message, fds = receive_line(conn, FDS_PER_WORKER)
        answer = template.answer(conn, message, fds, listener)
        if answer is None:
            return  # the connection waits for a worker's exit (Template.reap answers it)
        send_line(conn, answer)
    except (OSError, ValueError, SocketError):
        pass  # a client gone or garbled
    finally:
        close_fds(fds)  # the worker has its own copies
    conn.close()


def serve(path: str, idle_s: float, device: str) -> int:
    from kernelladder.verifier.worker.__main__ import preload

    folder = private_dir(path, make=False)
    lock = _lock(folder, path)
    if lock is None:
        return 0  # another template of this recipe listens, or is starting
    preload(device)
    files = source_files.snapshot()
    template = Template(own_token(folder), files, idle_s)
    import gc

    gc.freeze()  # what was imported stays shared with the workers, not copied by gc
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # the lock was free: a socket file there is stale
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    inode = os.stat(path).st_ino
    listener.listen(64)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: setattr(template, "stopping", True))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        while not template.done():
            with contextlib.suppress(InterruptedError):
                ready, _, _ = select.select([listener], [], [], TICK_S)
                if ready:
                    conn, _ = listener.accept()
                    _serve_one(template, conn, listener)
            template.reap()
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)  # new callers now start a new template
        listener.close()
        for conn in template._open_conns():
            with conn, contextlib.suppress(OSError):
                send_line(conn, {"ok": True, "status": None})  # unknown from now on
        os.close(lock)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelladder.verifier.worker.template")
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--socket", required=True, help="where to listen")
    parser.add_argument("--home", default=None, help="its own directory, removed as it exits")
    parser.add_argument("--idle-s", type=float, default=60.0, help="exit after this quiet")
    args = parser.parse_args(argv)
    try:
        return serve(args.socket, args.idle_s, args.device)
    except (SocketError, OSError) as exc:
        print(f"worker template: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.home:
            shutil.rmtree(args.home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
