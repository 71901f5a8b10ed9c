"""The keeper of verifier workers kept warm between local runs (one small process per
user): where it listens, its wire, the requests a run makes of it, and starting one.

A local run that ends with idle, healthy workers hands them to the keeper instead of
shutting them down (`put`); the next local run on this machine whose workers would be
started from the same recipe (LocalTransport.recipe) takes them (`take`), their hello
already said, their compiled baselines and caches kept. The keeper holds no GPU and
runs nothing a client sends: it only holds each worker's pipes (its stdin's write end,
its stdout's and stderr's read ends), which travel over a unix socket as SCM_RIGHTS.

    python -m kernelladder.verifier.host.keeper_server --socket PATH --idle-s N
    python -m kernelladder.verifier.host.keeper list|stop

Where: $KERNELLADDER_KEEPER_SOCKET, else $XDG_RUNTIME_DIR/kernelladder/keeper.sock, else
keeper/keeper.sock in kernelladder's cache directory (calibration.cache_file's). The
directory is the user's own, mode 0700; the socket answers only peers of the keeper's
uid (SO_PEERCRED) that send the token kept beside it (a 0600 file), so a candidate
behind the sandbox's walls, which cannot read that directory, cannot hand a forged
worker to the next run, take one, or stop the keeper.

One request per connection, one JSON line each way (the descriptors ride with the line):
    put   {"worker": {recipe, pid, start_time, home, hello, device, gpu, cuda_device},
           "keep_s": s, "cap": n}  + 3 fds          -> {"ok": true}
    take  {"recipe": key, "count": n}               -> {"ok": true, "workers": [...]} + 3 fds each
    list  {}                                        -> {"ok": true, "workers": [...], "pid": ...}
    stop  {}                                        -> {"ok": true, "stopped": [pid, ...]}

A worker is kept `keep_s` seconds (default --idle-s), then killed (its process group:
each worker leads its own session) and its scratch directory removed; one that dies
while kept is dropped the same way and never handed out. At most `cap` workers of one
recipe are kept (the number the run that last handed some back had): the longest kept
go first. With nothing kept the keeper exits after min(LINGER_S, --idle-s). Standard
library only, like the rest of the verifier.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import os
import secrets
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from typing import Any

SOCKET_ENV = "KERNELLADDER_KEEPER_SOCKET"
SOCKET_NAME = "keeper.sock"
TOKEN_NAME = "token"
LOCK_NAME = "keeper.lock"
WIRE_VERSION = 1
FDS_PER_WORKER = 3  # stdin's write end, stdout's and stderr's read ends
REQUEST_TIMEOUT_S = 0.5  # a keeper that does not answer costs a run's end this, no more
START_TIMEOUT_S = 2.0  # a keeper started now listens within this (typically 0.1 s)
LINGER_S = 30.0  # with nothing kept, the keeper exits after this (or --idle-s, if shorter)
TICK_S = 0.25  # how often the keeper looks for dead and expired workers
MAX_TAKE = 64
MAX_LINE = 4 * 1024 * 1024
WORKER_FIELDS = ("recipe", "pid", "start_time", "home", "hello", "device", "gpu", "cuda_device")


class KeeperError(Exception):
    """The keeper refused a request, or answered nothing usable."""


class KeeperUnreachable(KeeperError):
    """No keeper listens (or it is exiting): one may be started."""


# --- where -------------------------------------------------------------------------------


def socket_path() -> str:
    given = os.environ.get(SOCKET_ENV)
    if given:
        return os.path.abspath(given)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "kernelladder", SOCKET_NAME)
    from kernelladder.verifier.host.calibration import cache_file

    return os.path.join(str(cache_file().parent), "keeper", SOCKET_NAME)


def private_dir(path: str, *, make: bool) -> str:
    """The socket's directory: this user's own, a real directory, closed to others (made
    so when missing and `make`); KeeperError otherwise (it is never chmod-ed: it may be a
    shared directory someone named by mistake)."""
    folder = os.path.dirname(path)
    if make:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise KeeperUnreachable(f"no keeper directory {folder}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise KeeperError(f"{folder} is not a directory of this user's")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise KeeperError(f"{folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o})")
    return folder


def own_token(folder: str) -> str:
    """The secret a request must carry: made once (the first maker's stands), 0600."""
    path = os.path.join(folder, TOKEN_NAME)
    with contextlib.suppress(FileNotFoundError):
        return _read_token(path)
    partial = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode())
    finally:
        os.close(fd)
    try:
        os.link(partial, path)  # atomic: a reader never sees half a token
    except FileExistsError:
        pass
    finally:
        os.unlink(partial)
    return _read_token(path)


def _read_token(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise KeeperError(f"{path} is not this user's private token")
        return f.read(128).decode("ascii", errors="replace").strip()


# --- the wire ----------------------------------------------------------------------------


def send_line(
    sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()
) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
    if sent < len(data):  # nothing more once the line is out: the peer may have closed
        sock.sendall(data[sent:])


def receive_line(sock: socket.socket, max_fds: int) -> tuple[dict[str, Any], list[int]]:
    """One JSON line and the descriptors that came with it (close-on-exec)."""
    data, fds = bytearray(), []
    ancillary = socket.CMSG_SPACE(max_fds * 4) if max_fds else 0
    try:
        while b"\n" not in data:
            chunk, anc, flags, _ = sock.recvmsg(65536, ancillary, socket.MSG_CMSG_CLOEXEC)
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
            if flags & socket.MSG_CTRUNC:
                raise KeeperError("more descriptors came than were asked for")
            if not chunk:
                raise ConnectionResetError("the peer closed the connection")
            data += chunk
            if len(data) > MAX_LINE:
                raise KeeperError("an over-long line")
        message = json.loads(bytes(data[: data.index(b"\n")]))
        if not isinstance(message, dict):
            raise KeeperError("not a JSON object")
        return message, fds
    except BaseException:
        close_fds(fds)
        raise


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


MAX_SOCKET_PATH = 107  # bytes: sun_path's size on Linux, less its terminating NUL


def _check_supported(path: str) -> None:
    """KeeperError where no keeper can be had: not Linux (SO_PEERCRED, MSG_CMSG_CLOEXEC),
    or a socket path longer than a unix socket's address holds."""
    if not (hasattr(socket, "SO_PEERCRED") and hasattr(socket, "MSG_CMSG_CLOEXEC")):
        raise KeeperError("keeping workers needs Linux (SO_PEERCRED)")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise KeeperError(f"the keeper's socket path is too long for a unix socket: {path}")


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


# --- the client's calls -------------------------------------------------------------------


def request(
    message: dict[str, Any],
    fds: list[int] | tuple[int, ...] = (),
    *,
    max_fds: int = 0,
    path: str | None = None,
    timeout: float = REQUEST_TIMEOUT_S,
) -> tuple[dict[str, Any], list[int]]:
    """One request to the keeper: its answer and the descriptors that came with it.
    KeeperUnreachable when none listens; KeeperError when it refuses or does not answer
    within `timeout` (per step: connect, send, receive)."""
    path = path or socket_path()
    _check_supported(path)
    folder = private_dir(path, make=False)
    if not os.path.exists(path):
        raise KeeperUnreachable(f"no keeper at {path}")
    token = own_token(folder)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            if peer_uid(sock) != os.getuid():
                raise KeeperError(f"{path} is served by another user")
            send_line(sock, {**message, "version": WIRE_VERSION, "token": token}, fds)
            answer, got = receive_line(sock, max_fds)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            raise KeeperUnreachable(f"no keeper answers at {path}") from None
        except TimeoutError:
            raise KeeperError(f"the keeper at {path} did not answer within {timeout:g}s") from None
        except (OSError, ValueError) as exc:
            raise KeeperError(f"the keeper at {path}: {type(exc).__name__}: {exc}") from None
    if not answer.get("ok"):
        close_fds(got)
        error = str(answer.get("error") or "refused")
        raise (KeeperUnreachable if answer.get("exiting") else KeeperError)(error)
    return answer, got


def answers(path: str | None = None) -> bool:
    """Whether a keeper listens and answers this user."""
    try:
        request({"op": "list"}, path=path)
    except (KeeperError, OSError):
        return False
    return True


_disowned: list[int] = []  # children left to live on (workers kept, keepers): reaped later
_start_lock = threading.Lock()
_failed_at: dict[str, float] = {}  # path -> when a keeper last failed to start there
RETRY_START_S = 30.0  # after a failed start, the run's other workers do not wait again


def disown(proc: subprocess.Popen[bytes]) -> None:
    """Let a child live on past its Popen (a worker handed to the keeper, a keeper):
    reaped by reap_disowned once it exits, never waited for or warned about by Popen."""
    _disowned.append(proc.pid)
    proc.returncode = 0  # Popen's own reaping and its "still running" warning stand down


def reap_disowned() -> None:
    for pid in list(_disowned):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _disowned.remove(pid)


def ensure_running(idle_s: float, *, path: str | None = None) -> bool:
    """A keeper listening at `path`: the one there, or one started now (detached: its
    own session, stdio to /dev/null, a scrubbed environment). False when none answers
    within START_TIMEOUT_S or the directory is not private."""
    path = path or socket_path()
    try:
        _check_supported(path)
    except KeeperError:
        return False
    with _start_lock:
        reap_disowned()
        if answers(path):
            return True
        if time.monotonic() - _failed_at.get(path, -RETRY_START_S) < RETRY_START_S:
            return False
        _failed_at[path] = time.monotonic()  # cleared once one answers
        try:
            private_dir(path, make=True)
        except (KeeperError, OSError):
            return False
        import kernelladder
        from kernelladder.verifier.contract.env import scrub_env

        root = os.path.dirname(os.path.dirname(os.path.abspath(kernelladder.__file__)))
        env = scrub_env(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        args = [sys.executable, "-m", "kernelladder.verifier.host.keeper_server"]
        args += ["--socket", path, "--idle-s", f"{float(idle_s):g}"]
        try:
            disown(
                subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd="/",
                    env=env,
                    start_new_session=True,
                )  # fmt: skip
            )
        except OSError:
            return False
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if answers(path):
                _failed_at.pop(path, None)
                return True
            time.sleep(0.02)
        return False


def put(
    worker: dict[str, Any], fds: list[int], *, keep_s: float, cap: int, path: str | None = None
) -> None:
    """Hand one worker to the keeper (it holds its own copies of `fds` from now on)."""
    meta = {k: worker.get(k) for k in WORKER_FIELDS}
    request({"op": "put", "worker": meta, "keep_s": keep_s, "cap": cap}, fds, path=path)


def hand_over(
    worker: dict[str, Any], fds: list[int], *, keep_s: float, cap: int, path: str | None = None
) -> None:
    """put(), starting a keeper first when none answers (KeeperError if none can be had)."""
    try:
        put(worker, fds, keep_s=keep_s, cap=cap, path=path)
    except KeeperUnreachable:
        if not ensure_running(keep_s, path=path):
            raise
        put(worker, fds, keep_s=keep_s, cap=cap, path=path)


def take(
    recipe: str, count: int, *, path: str | None = None
) -> list[tuple[dict[str, Any], list[int]]]:
    """Up to `count` kept workers of `recipe`, each with its three descriptors (now the
    caller's); [] when there are none or no keeper answers."""
    count = max(0, min(int(count), MAX_TAKE))
    if count == 0:
        return []
    try:
        answer, fds = request(
            {"op": "take", "recipe": recipe, "count": count},
            max_fds=count * FDS_PER_WORKER,
            path=path,
        )
    except (KeeperError, OSError):
        return []
    workers = answer.get("workers")
    if not isinstance(workers, list) or len(fds) != len(workers) * FDS_PER_WORKER:
        close_fds(fds)  # the workers see their stdin close and exit
        return []
    return [
        (dict(w), fds[i * FDS_PER_WORKER : (i + 1) * FDS_PER_WORKER]) for i, w in enumerate(workers)
    ]


def list_kept(path: str | None = None) -> list[dict[str, Any]] | None:
    """The kept workers (recipe, pid, device, age_s, left_s, ...); None: no keeper runs.
    KeeperError when one is there but does not answer."""
    try:
        answer, _ = request({"op": "list"}, path=path)
    except KeeperUnreachable:
        return None
    return [dict(w) for w in answer.get("workers") or []]


def stop(path: str | None = None) -> list[int] | None:
    """Stop the keeper: every kept worker killed, their scratch removed; their pids.
    None: no keeper ran."""
    try:
        answer, _ = request({"op": "stop"}, path=path, timeout=10.0)
    except KeeperUnreachable:
        return None
    return [int(p) for p in answer.get("stopped") or []]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelladder.verifier.host.keeper")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the kept workers, as JSON")
    sub.add_parser("stop", help="kill the kept workers and stop the keeper")
    args = parser.parse_args(argv)
    try:
        result: Any = list_kept() if args.command == "list" else stop()
    except (KeeperError, OSError) as exc:
        print(f"keeper: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    # run as the module keeper_server imports, so that one KeeperError class is raised and caught
    from kernelladder.verifier.host import keeper

    sys.exit(keeper.main())
