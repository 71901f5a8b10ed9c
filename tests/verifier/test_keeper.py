"""The keeper process itself (verifier/host/keeper.py, keeper_server.py): one keeper however many start it at
once, a stale socket file replaced, a request without the token or from another user
refused, at most `cap` workers of one recipe held, a dead process never taken in. The
processes it holds here are plain stand-ins with the three pipes a worker has: the
keeper only holds a worker's descriptors and watches its pid, which a stand-in gives it
as a real worker would, in a fraction of the time (test_kept_workers.py holds real ones)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import ROOT

from kernelladder.verifier.contract.scratch import process_start_time
from kernelladder.verifier.host import keeper


def stand_in() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip


def put(proc: subprocess.Popen, path: str, *, recipe: str = "r", cap: int = 4) -> None:
    worker = {"recipe": recipe, "pid": proc.pid, "start_time": process_start_time(proc.pid)}
    fds = [proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()]
    keeper.hand_over(worker, fds, keep_s=60, cap=cap, path=path)


def serve(path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kernelladder.verifier.host.keeper_server", "--socket", path,
         "--idle-s", "60"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def raw_request(path: str, message: dict) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(json.dumps(message).encode() + b"\n")
        return sock.recv(65536)


def test_keepers_started_at_once_end_as_one(keeper_socket):
    racers = [serve(keeper_socket) for _ in range(3)]
    try:
        deadline = time.monotonic() + 20
        while sum(p.poll() is None for p in racers) > 1 or not keeper.answers(keeper_socket):
            assert time.monotonic() < deadline, [p.poll() for p in racers]
            time.sleep(0.05)
        losers = [p.returncode for p in racers if p.poll() is not None]
        assert losers == [0, 0]
        (winner,) = [p for p in racers if p.poll() is None]
        answer, _ = keeper.request({"op": "list"}, path=keeper_socket)
        assert answer["pid"] == winner.pid and answer["workers"] == []
        assert keeper.stop(keeper_socket) == []
        assert winner.wait(10) == 0 and not os.path.exists(keeper_socket)
    finally:
        for proc in racers:
            proc.kill()
            proc.wait()


def test_a_stale_socket_file_is_replaced(keeper_socket):
    os.makedirs(os.path.dirname(keeper_socket), mode=0o700)
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(keeper_socket)  # a keeper killed with SIGKILL leaves its file so
    left.close()
    assert not keeper.answers(keeper_socket)
    assert keeper.ensure_running(60, path=keeper_socket)
    assert keeper.list_kept(keeper_socket) == []


def test_workers_are_held_up_to_the_cap_and_a_dead_one_is_refused(keeper_socket):
    procs = [stand_in() for _ in range(3)]
    try:
        put(procs[0], keeper_socket, cap=2)
        put(procs[1], keeper_socket, cap=2)
        put(procs[2], keeper_socket, recipe="other", cap=2)
        assert sorted(w["pid"] for w in keeper.list_kept(keeper_socket)) == sorted(
            p.pid for p in procs
        )
        newest = stand_in()
        procs.append(newest)
        put(newest, keeper_socket, cap=2)  # the longest kept of its recipe goes
        assert procs[0].wait(10) == -signal.SIGKILL
        dead = stand_in()
        procs.append(dead)
        dead.kill()
        dead.wait()
        with pytest.raises(keeper.KeeperError, match="no such worker"):
            put(dead, keeper_socket)
        taken = keeper.take("r", 5, path=keeper_socket)
        assert [w["pid"] for w, _ in taken] == [newest.pid, procs[1].pid]  # warmest first
        for _, fds in taken:
            for fd in fds:
                os.close(fd)
        assert [w["pid"] for w in keeper.list_kept(keeper_socket)] == [procs[2].pid]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_request_without_the_token_is_refused(keeper_socket):
    assert keeper.ensure_running(60, path=keeper_socket)
    answer = json.loads(raw_request(keeper_socket, {"op": "stop", "version": 1, "token": "x"}))
    assert answer == {"ok": False, "error": "wrong token"}
    assert keeper.answers(keeper_socket)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_a_peer_of_another_user_gets_no_answer(keeper_socket):
    assert keeper.ensure_running(60, path=keeper_socket)
    folder = os.path.dirname(keeper_socket)
    for reachable in (os.path.dirname(folder), folder):  # by the other user, for this test
        os.chmod(reachable, 0o711)
    os.chmod(keeper_socket, 0o777)
    probe = (
        "import os, socket; os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5)\n"
        f"s.connect({keeper_socket!r})\n"
        "try:\n"
        "    s.sendall(b'{}\\n')\n"
        "    print(repr(s.recv(100)))\n"
        "except (ConnectionResetError, BrokenPipeError):\n"
        "    print(repr(b''))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30
        )
    finally:
        for reachable in (os.path.dirname(folder), folder):
            os.chmod(reachable, 0o700)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b''"  # closed (or reset) without a word
    assert keeper.answers(keeper_socket)


def test_a_keeper_directory_open_to_others_is_refused(keeper_socket):
    folder = os.path.dirname(keeper_socket)
    os.makedirs(folder, mode=0o700)
    os.chmod(folder, 0o755)
    assert not keeper.ensure_running(60, path=keeper_socket)
    with pytest.raises(keeper.KeeperError, match="open to other users"):
        keeper.list_kept(keeper_socket)


def test_a_keeper_served_in_a_directory_open_to_others_says_why_in_one_line(keeper_socket):
    folder = os.path.dirname(keeper_socket)
    os.makedirs(folder, mode=0o700)
    os.chmod(folder, 0o755)
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder.verifier.host.keeper_server", "--socket",
         keeper_socket, "--idle-s", "1"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"keeper: {folder} is open to other users (mode 755)"
    ], out.stderr


def test_a_socket_path_too_long_for_a_unix_socket_starts_no_keeper(tmp_path):
    path = str(tmp_path / ("d" * 120) / "keeper.sock")
    assert not keeper.ensure_running(60, path=path)
    assert not os.path.exists(os.path.dirname(path))  # no start was tried
    with pytest.raises(keeper.KeeperError, match="too long"):
        keeper.list_kept(path)


def test_the_keeper_and_the_client_side_import_no_torch():
    probe = (
        "import sys\n"
        "import kernelladder.verifier.host.keeper, kernelladder.verifier.host.keeper_server\n"
        "import kernelladder.verifier.host.pool\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'textual') "
        "or m.startswith('kernelladder.engine')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_killed_stand_in_leaves_no_trace_in_the_list(keeper_socket):
    proc = stand_in()
    try:
        put(proc, keeper_socket)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert keeper.list_kept(keeper_socket) == []
    finally:
        proc.kill()
        proc.wait()
