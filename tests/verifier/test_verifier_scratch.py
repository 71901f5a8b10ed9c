"""Worker scratch directories left behind by SIGKILLed workers or callers are swept when
the next worker starts; a live owner's directory, a symlink, someone else's directory and
a fresh directory without a marker are never touched. Real worker subprocesses, real
processes as owners."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelladder.engine.runners.ssh.link import WORKER_BOOTSTRAP
from kernelladder.verifier.contract import scratch
from kernelladder.verifier.host.client import LocalTransport, WorkerClient
from kernelladder.verifier.host.local_transport import package_root

START_S = 120.0

# A caller in its own process: starts a worker, says where its scratch dir is, waits.
CALLER = """\
import asyncio
from kernelladder.verifier.host.client import LocalTransport, WorkerClient
async def main():
    transport = LocalTransport("cpu")
    client = WorkerClient(lambda: transport)
    hello = await client.hello()
    print(transport.home, hello["pid"], flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def marked_dir(parent: Path, name: str, pids: list[int]) -> Path:
    path = parent / name
    path.mkdir()
    scratch.write_marker(str(path), pids)
    (path / "candidate.py").write_text("x = 1\n")
    return path


def owners(path: Path) -> list[tuple[int, int | None]]:
    lines = (path / scratch.MARKER_NAME).read_text().splitlines()
    return [(int(w[1]), None if w[2] == "-" else int(w[2])) for w in map(str.split, lines[2:])]


def gone(pid: int, start: int | None) -> bool:
    return not scratch.owner_alive(pid, start)


async def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temp dir, private to the test (so no one else's dirs are swept)."""
    parent = tmp_path / "tmp"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    return parent


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- end to end: real workers ---------------------------------------------------------


async def test_a_killed_callers_worker_dir_is_swept_by_the_next_worker_a_live_one_stays(
    temp_dir: Path,
):
    env = {**os.environ, "TMPDIR": str(temp_dir)}
    caller = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CALLER, stdout=asyncio.subprocess.PIPE, env=env
    )
    live = LocalTransport("cpu")
    live_client = WorkerClient(lambda: live)
    fresh: LocalTransport | None = None
    try:
        line, _ = await asyncio.gather(
            asyncio.wait_for(caller.stdout.readline(), START_S), live_client.hello()
        )
        home_text, pid_text = line.decode().split()
        killed_home, worker_pid = Path(home_text), int(pid_text)
        assert killed_home.parent == temp_dir and live.home is not None
        assert {pid for pid, _ in owners(killed_home)} == {caller.pid, worker_pid}
        worker_start = dict(owners(killed_home))[worker_pid]

        # kill -9 for both, as a hung candidate's box would see: nobody cleans up
        os.killpg(worker_pid, signal.SIGKILL)
        caller.kill()
        await caller.wait()
        await wait_until(lambda: gone(worker_pid, worker_start))
        assert killed_home.is_dir()

        fresh = LocalTransport("cpu")
        await fresh.start()
        assert not killed_home.exists()
        assert Path(live.home).is_dir()  # its owners (this process, its worker) live
        assert fresh.home is not None and Path(fresh.home).parent == temp_dir
        assert {pid for pid, _ in owners(Path(fresh.home))} == {os.getpid(), fresh.pid}
    finally:
        if caller.returncode is None:
            caller.kill()
            await caller.wait()
        if fresh is not None:
            await fresh.kill()
        live_home = live.home
        await live_client.close()
    assert live_home is not None and not Path(live_home).exists()  # a clean close removes it
    assert fresh.home is None and list(temp_dir.glob("kl-worker-*")) == []


def test_the_remote_bootstrap_sweeps_marks_its_home_and_the_worker_removes_it(
    tmp_path: Path, dead_pid: int
):
    stale = marked_dir(tmp_path, "kl-worker-stale", [dead_pid])
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    tree = package_root()
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER_BOOTSTRAP, tree, "0", "cpu"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tree,
        env=env,
    )
    try:
        assert worker.stdout is not None and worker.stdin is not None
        pgid = json.loads(worker.stdout.readline())["pgid"]
        while True:
            line = worker.stdout.readline()
            assert line, "the worker exited before its hello"
            message = json.loads(line)
            if message.get("type") == "hello":
                break
        assert message["pid"] == pgid == worker.pid  # the bootstrap became the worker
        assert not stale.exists()
        (home,) = tmp_path.glob("kl-worker-*")
        assert owners(home) == [(worker.pid, scratch.process_start_time(worker.pid))]
        worker.stdin.write(b'{"type": "shutdown"}\n')
        worker.stdin.flush()
        assert worker.wait(timeout=60) == 0
        assert not home.exists()  # removed by the worker itself (--remove-scratch)
    finally:
        worker.kill()
        worker.wait()


def test_a_worker_started_by_hand_marks_and_removes_its_own_scratch(tmp_path: Path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "kernelladder.verifier.worker", "--device", "cpu"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert worker.stdout is not None and worker.stdin is not None
        hello = json.loads(worker.stdout.readline())
        assert hello["type"] == "hello", hello
        (home,) = tmp_path.glob("kl-worker-*")
        assert [pid for pid, _ in owners(home)] == [worker.pid]
        worker.stdin.close()  # the caller went away
        assert worker.wait(timeout=60) == 0
        assert not home.exists()
    finally:
        worker.kill()
        worker.wait()


# --- the sweep's rules, with real processes as owners ---------------------------------


def test_a_live_owner_keeps_its_dir_a_dead_one_does_not(tmp_path: Path, sleeper, dead_pid):
    live = marked_dir(tmp_path, "kl-worker-live", [sleeper.pid])
    dead = marked_dir(tmp_path, "kl-worker-dead", [dead_pid])
    either = marked_dir(tmp_path, "kl-worker-either", [dead_pid, sleeper.pid])
    assert scratch.sweep_stale(str(tmp_path)) == [str(dead)]
    assert live.is_dir() and either.is_dir() and not dead.exists()
    assert (live / "candidate.py").is_file()


def test_a_reused_pid_with_another_start_time_is_not_the_owner(tmp_path: Path, sleeper):
    start = scratch.process_start_time(sleeper.pid)
    if start is None:
        pytest.skip("no /proc start times on this system")
    reused = tmp_path / "kl-worker-reused"
    reused.mkdir()
    marker = (
        f"{scratch.MARKER_MAGIC}\nhost {scratch.host_identity()}\npid {sleeper.pid} {start + 1}\n"
    )
    (reused / scratch.MARKER_NAME).write_text(marker)
    assert scratch.owner_alive(sleeper.pid, start)
    assert scratch.sweep_stale(str(tmp_path)) == [str(reused)]


def test_symlinks_are_never_followed_or_removed(tmp_path: Path, dead_pid: int):
    parent = tmp_path / "tmp"
    parent.mkdir()
    target = marked_dir(tmp_path, "elsewhere", [dead_pid])  # stale by its marker
    (parent / "kl-worker-link").symlink_to(target, target_is_directory=True)
    (parent / "kl-worker-file").symlink_to(target / "candidate.py")
    assert scratch.sweep_stale(str(parent)) == []
    assert (parent / "kl-worker-link").is_symlink() and (parent / "kl-worker-file").is_symlink()
    assert (target / "candidate.py").is_file() and (target / scratch.MARKER_NAME).is_file()


def test_unmarked_dirs_stay_until_a_day_old(tmp_path: Path):
    fresh = tmp_path / "kl-worker-fresh"
    fresh.mkdir()
    junk = tmp_path / "kl-worker-junk"
    junk.mkdir()
    (junk / scratch.MARKER_NAME).write_text("not a marker\n")
    old = tmp_path / "kl-worker-old"
    old.mkdir()
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old, (two_days_ago, two_days_ago))
    other = tmp_path / "other-dir"
    other.mkdir()
    os.utime(other, (two_days_ago, two_days_ago))
    assert scratch.sweep_stale(str(tmp_path)) == [str(old)]
    assert fresh.is_dir() and junk.is_dir() and other.is_dir()


def test_pids_from_another_namespace_or_boot_are_judged_by_age_only(tmp_path: Path, dead_pid: int):
    foreign = tmp_path / "kl-worker-foreign"
    foreign.mkdir()
    marker = f"{scratch.MARKER_MAGIC}\nhost another-boot/pid:[1]\npid {dead_pid} -\n"
    (foreign / scratch.MARKER_NAME).write_text(marker)
    assert scratch.sweep_stale(str(tmp_path)) == []
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(foreign, (two_days_ago, two_days_ago))
    assert scratch.sweep_stale(str(tmp_path)) == [str(foreign)]


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's dir needs root")
def test_another_users_dir_is_never_touched(tmp_path: Path, dead_pid: int):
    theirs = marked_dir(tmp_path, "kl-worker-theirs", [dead_pid])
    os.chown(theirs, 65534, 65534)
    assert scratch.sweep_stale(str(tmp_path)) == []
    assert theirs.is_dir()


def test_a_sweep_never_raises(tmp_path: Path):
    assert scratch.sweep_stale(str(tmp_path / "missing")) == []
    (tmp_path / "kl-worker-a-file").write_text("")
    assert scratch.sweep_stale(str(tmp_path)) == []


def test_make_scratch_sweeps_then_marks_with_the_owners(tmp_path: Path, sleeper, dead_pid):
    stale = marked_dir(tmp_path, "kl-worker-stale", [dead_pid])
    home = Path(scratch.make_scratch(str(tmp_path), owners=[sleeper.pid]))
    assert not stale.exists() and home.name.startswith(scratch.SCRATCH_PREFIX)
    scratch.add_owner(str(home), os.getpid())
    assert [pid for pid, _ in owners(home)] == [sleeper.pid, os.getpid()]
    assert scratch.sweep_stale(str(tmp_path)) == []
