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
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from kernelladder.verifier.contract import private_socket
from kernelladder.verifier.contract.private_socket import (
    SocketError,
    SocketUnreachable,
    check_supported,
    close_fds,
    private_dir,
)

SOCKET_ENV = "KERNELLADDER_KEEPER_SOCKET"
SOCKET_NAME = "keeper.sock"
LOCK_NAME = "keeper.lock"
WIRE_VERSION = 1
FDS_PER_WORKER = 3  # stdin's write end, stdout's and stderr's read ends
REQUEST_TIMEOUT_S = 2.0  # a keeper that does not answer costs a run's start or end this, no more
START_TIMEOUT_S = 2.0  # a keeper started now listens within this (typically 0.1 s)
LINGER_S = 30.0  # with nothing kept, the keeper exits after this (or --idle-s, if shorter)
TICK_S = 0.25  # how often the keeper looks for dead and expired workers
MAX_TAKE = 64
WORKER_FIELDS = ("recipe", "pid", "start_time", "home", "hello", "device", "gpu", "cuda_device")


KeeperError = SocketError  # the keeper refused a request, or answered nothing usable
KeeperUnreachable = SocketUnreachable  # no keeper listens (or it is exiting): one may be started


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
    return private_socket.request(
        path or socket_path(),
        {**message, "version": WIRE_VERSION},
        fds,
        max_fds=max_fds,
        timeout=timeout,
        who="keeper",
    )


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
        check_supported(path)
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
