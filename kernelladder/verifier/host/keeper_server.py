"""The keeper's own process: it holds the workers handed to it, hands the warmest out
to a run that asks for workers of their recipe, and ends each one (its process group
killed, its scratch directory removed) when its time is up, it dies, or the keeper
stops. It answers only this user's processes that carry the token (keeper.py says where
it listens and what a request looks like)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from kernelladder.verifier.contract.private_socket import (
    close_fds,
    own_token,
    peer_uid,
    private_dir,
    receive_line,
    send_line,
)
from kernelladder.verifier.contract.scratch import SCRATCH_PREFIX, owner_alive, process_start_time
from kernelladder.verifier.host.keeper import (
    FDS_PER_WORKER,
    LINGER_S,
    LOCK_NAME,
    MAX_TAKE,
    REQUEST_TIMEOUT_S,
    START_TIMEOUT_S,
    TICK_S,
    WIRE_VERSION,
    WORKER_FIELDS,
    KeeperError,
    answers,
    socket_path,
)


@dataclass
class Kept:
    """One worker held: what the run that kept it said, and its pipes."""

    meta: dict[str, Any]
    fds: list[int]
    keep_s: float
    kept_at: float = field(default_factory=time.time)
    until: float = 0.0  # monotonic

    @property
    def pid(self) -> int:
        return int(self.meta["pid"])

    def alive(self) -> bool:
        start = self.meta.get("start_time")
        return owner_alive(self.pid, int(start) if start is not None else None)

    def still_there(self) -> bool:
        """Its pid still names it, alive or a zombie (its process group may hold the
        candidates' children): safe to signal."""
        start = self.meta.get("start_time")
        if start is None:
            return self.alive()
        return process_start_time(self.pid) == int(start)

    def shown(self) -> dict[str, Any]:
        now = time.time()
        return {
            **{k: self.meta.get(k) for k in WORKER_FIELDS if k != "hello"},
            "kept_at": self.kept_at,
            "age_s": round(now - self.kept_at, 1),
            "left_s": round(max(0.0, self.until - time.monotonic()), 1),
        }


def _scratch_of_ours(path: Any) -> str:
    """The worker's scratch directory if it looks like one (else "": nothing removed)."""
    if not isinstance(path, str) or not os.path.basename(path).startswith(SCRATCH_PREFIX):
        return ""
    try:
        info = os.lstat(path)
    except OSError:
        return ""
    return path if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() else ""


def end_workers(workers: list[Kept]) -> None:
    """Kill each (its whole process group), wait for them to go, remove their scratch."""
    for worker in workers:
        close_fds(worker.fds)  # its stdin closes: a worker that still reads exits by itself too
        worker.fds = []
        if worker.still_there():  # not a pid some other process has been given since
            with contextlib.suppress(OSError):
                os.killpg(worker.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any(w.alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    for worker in workers:
        home = _scratch_of_ours(worker.meta.get("home"))
        if home:
            shutil.rmtree(home, ignore_errors=True)


class Keeper:
    """What the server holds, and its answer to each request."""

    def __init__(self, idle_s: float, token: str):
        self.idle_s = max(0.0, float(idle_s))
        self.token = token
        self.workers: list[Kept] = []
        self.empty_since = time.monotonic()

    def linger_s(self) -> float:
        return min(LINGER_S, self.idle_s)

    def sweep(self) -> None:
        """Drop the dead and the expired."""
        now = time.monotonic()
        gone = [w for w in self.workers if now >= w.until or not w.alive()]
        if gone:
            self.workers = [w for w in self.workers if w not in gone]
            end_workers(gone)
        if self.workers:
            self.empty_since = now

    def done(self) -> bool:
        return not self.workers and time.monotonic() - self.empty_since >= self.linger_s()

    def answer(self, message: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[Kept]]:
        """The answer to one request and the workers it hands out (sent with it)."""
        if not secrets.compare_digest(str(message.get("token") or ""), self.token):
            return {"ok": False, "error": "wrong token"}, []
        if message.get("version") != WIRE_VERSION:
            return {"ok": False, "error": f"the keeper speaks wire version {WIRE_VERSION}"}, []
        op = message.get("op")
        if op == "put":
            return self._put(message, fds), []
        if op == "take":
            return self._take(message)
        if op == "list":
            self.sweep()
            return {
                "ok": True,
                "pid": os.getpid(),
                "workers": [w.shown() for w in self.workers],
            }, []
        if op == "stop":
            workers, self.workers = self.workers, []
            end_workers(workers)
            return {"ok": True, "stopped": [w.pid for w in workers], "stopping": True}, []
        return {"ok": False, "error": f"unknown op {op!r}"}, []

    def _put(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        meta = message.get("worker")
        if not isinstance(meta, dict) or len(fds) != FDS_PER_WORKER:
            return {"ok": False, "error": "a put needs a worker and its three descriptors"}
        try:
            keep_s = float(message.get("keep_s") or self.idle_s)
            cap = max(1, int(message.get("cap") or 1))
            worker = Kept({k: meta.get(k) for k in WORKER_FIELDS}, list(fds), keep_s)
            if not isinstance(meta.get("recipe"), str) or not worker.alive():
                return {"ok": False, "error": "no such worker (or no recipe)"}
        except (TypeError, ValueError, KeyError):
            return {"ok": False, "error": "a malformed worker"}
        worker.until = time.monotonic() + keep_s
        fds.clear()  # the worker's now
        for held in [w for w in self.workers if w.pid == worker.pid]:  # handed over again
            close_fds(held.fds)
            self.workers.remove(held)
        self.workers.append(worker)
        same = [w for w in self.workers if w.meta["recipe"] == worker.meta["recipe"]]
        surplus = sorted(same, key=lambda w: w.kept_at)[: max(0, len(same) - cap)]
        if surplus:
            self.workers = [w for w in self.workers if w not in surplus]
            end_workers(surplus)
        self.empty_since = time.monotonic()
        return {"ok": True}

    def _take(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[Kept]]:
        self.sweep()
        try:
            count = max(0, min(int(message.get("count") or 0), MAX_TAKE))
        except (TypeError, ValueError):
            return {"ok": False, "error": "a malformed count"}, []
        recipe = message.get("recipe")
        same = [w for w in self.workers if w.meta["recipe"] == recipe]
        given = sorted(same, key=lambda w: w.kept_at, reverse=True)[:count]  # the warmest
        return {"ok": True, "workers": [w.meta for w in given]}, given

    def serve_one(self, conn: socket.socket) -> bool:
        """One connection's request; True when it asked the keeper to stop."""
        conn.settimeout(REQUEST_TIMEOUT_S / 2)
        fds: list[int] = []
        answer: dict[str, Any] = {}
        try:
            if peer_uid(conn) != os.getuid():
                return False  # another user's process: not a word
            message, fds = receive_line(conn, FDS_PER_WORKER)
            answer, given = self.answer(message, fds)
            send_line(conn, answer, [fd for w in given for fd in w.fds])
            if given:  # sent: they are the taker's now
                self.workers = [w for w in self.workers if w not in given]
                for worker in given:
                    close_fds(worker.fds)
                    worker.fds = []
                self.empty_since = time.monotonic()
        except (OSError, ValueError, KeeperError):
            pass  # a client gone or garbled: it shuts its workers down itself
        finally:
            close_fds(fds)  # what was not kept
        return bool(answer.get("stopping"))


def _lock(folder: str, path: str) -> int | None:
    """The keeper's lock (held for its life): an fd, or None when another keeper answers
    at `path` (or still holds the lock after START_TIMEOUT_S)."""
    fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            # another keeper: running (it answers), starting, or on its way out
            if answers(path) or time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.02)


def serve(path: str, idle_s: float) -> int:
    """Listen at `path` until nothing has been kept for the linger time, or a stop."""
    folder = private_dir(path, make=True)
    lock = _lock(folder, path)
    if lock is None:
        return 0  # another keeper won
    keeper = Keeper(idle_s, own_token(folder))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # the lock was free: whatever socket file is there is stale
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    inode = os.stat(path).st_ino
    listener.listen(64)
    listener.settimeout(TICK_S)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.append(signum))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        while not stopping:
            try:
                conn, _ = listener.accept()
            except (TimeoutError, InterruptedError):
                conn = None
            if conn is not None:
                with conn:
                    if keeper.serve_one(conn):
                        break
            keeper.sweep()
            if keeper.done():
                break
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)  # new clients now start a new keeper
        _refuse_backlog(listener)
        listener.close()
        workers, keeper.workers = keeper.workers, []
        end_workers(workers)
        os.close(lock)
    return 0


def _refuse_backlog(listener: socket.socket) -> None:
    """Connections that came as the keeper decided to exit: told so (a put is then made
    to a new keeper); their descriptors close with the connection."""
    listener.settimeout(0)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn, contextlib.suppress(OSError, ValueError, KeeperError):
            conn.settimeout(REQUEST_TIMEOUT_S / 2)
            _, fds = receive_line(conn, FDS_PER_WORKER)
            close_fds(fds)
            send_line(conn, {"ok": False, "exiting": True, "error": "the keeper is exiting"})


def main(argv: list[str] | None = None) -> int:
    """The keeper's process, as keeper.ensure_running starts it."""
    parser = argparse.ArgumentParser(prog="python -m kernelladder.verifier.host.keeper_server")
    parser.add_argument("--socket", default=None, help=f"default: {socket_path()}")
    parser.add_argument("--idle-s", type=float, default=600.0, help="seconds a worker is kept")
    args = parser.parse_args(argv)
    try:
        return serve(args.socket or socket_path(), args.idle_s)
    except (KeeperError, OSError) as exc:
        print(f"keeper: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
