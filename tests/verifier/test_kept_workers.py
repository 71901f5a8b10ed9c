"""Workers kept warm between runs (verifier/host/keeper.py): a pool with keeping on hands its
idle workers to the keeper as it closes, and the next pool of the same recipe takes
them (the same processes: no new one starts) and verifies through them; another recipe,
a worker killed while kept, an edit of the verifier's files, keeping off and a keeper
that does not answer each end as they must. Real worker processes on the CPU (Triton's
interpreter) and a real keeper process, each test with a keeper socket of its own."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CHEATS, ROOT, until

from kernelladder.verifier.contract.scratch import owner_alive, process_start_time
from kernelladder.verifier.host import keeper
from kernelladder.verifier.host.local_transport import KEPT_NOTE
from kernelladder.verifier.host.pool import LocalPool

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()
REQUEST = {"op": "rmsnorm", "source": HONEST, "device": "cpu"}
KEEP_S = 60.0

# A run of its own, in another process that then exits: its pool hands its worker over.
EARLIER_RUN = """\
import asyncio, sys
from kernelladder.verifier.host.pool import LocalPool
async def main():
    pool = LocalPool("cpu", 1, keep_s=60)
    await pool.start()
    verdict = await pool.verify({"op": "rmsnorm", "source": sys.stdin.read(), "device": "cpu"})
    await pool.close()
    print(verdict.verdict, *pool.kept)
asyncio.run(main())
"""


@pytest.fixture(autouse=True)
def _workers_spawned(monkeypatch):
    """These tests are the keeper's: their workers are spawned, no worker template starts
    beside them (its imports, seconds of CPU, would slow the keeper's answers under a
    loaded machine; test_worker_template.py has the templates)."""
    monkeypatch.setenv("KERNELLADDER_WORKER_TEMPLATE", "0")


def alive(pid: int) -> bool:
    return owner_alive(pid, process_start_time(pid))


def kept_pids(path: str) -> list[int]:
    return [int(w["pid"]) for w in keeper.list_kept(path) or []]


async def started_pool(**options) -> LocalPool:
    pool = LocalPool("cpu", 1, **options)
    await pool.start()
    return pool


def test_a_worker_kept_by_one_run_is_taken_by_the_next_and_verifies(keeper_socket):
    """The earlier run is another process, gone by the time this one starts: the worker
    it kept is no child of ours. Taken, it says its hello again, answers a ping, and
    verifies; handed back at our close, it is kept again; killed while ours, its crash
    says honestly that its exit status cannot be known."""
    # kernelladder imported from ROOT (its cwd) and our environment as it is: a PYTHONPATH
    # of its own would give its worker another recipe than ours
    earlier = subprocess.run(
        [sys.executable, "-c", EARLIER_RUN], input=HONEST, capture_output=True, text=True,
        timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert earlier.returncode == 0, earlier.stderr[-2000:]
    verdict, pid = earlier.stdout.split()
    pid = int(pid)
    assert verdict == "pass" and alive(pid) and kept_pids(keeper_socket) == [pid]

    async def go():
        pool = await started_pool(keep_s=KEEP_S)
        client = pool.clients[0]
        first = {"taken": pool.taken, "pid": client.worker_pid, "kept": kept_pids(keeper_socket),
                 "counts": (client.workers_taken, client.workers_started),
                 "stderr": client._tail_text()}  # fmt: skip
        assert pool.taken == [pid], first
        home = client._transport.home
        marker = (Path(home) / ".kl-owner").read_text()
        again = await pool.verify(REQUEST, timeout_s=180)
        await pool.close()
        kept_again = (pool.kept, kept_pids(keeper_socket))
        pool = await started_pool(keep_s=KEEP_S)
        client = pool.clients[0]
        os.killpg(pid, signal.SIGKILL)  # from outside, while this run holds it
        crashed = await pool.verify(REQUEST, timeout_s=180)
        replaced = await pool.verify(REQUEST, timeout_s=180)
        new_pid = client.worker_pid
        await pool.close()
        return (
            pool, client, marker, again, kept_again, crashed, replaced, new_pid, home,
        )  # fmt: skip

    pool, client, marker, again, kept_again, crashed, replaced, new_pid, home = asyncio.run(go())
    assert pool.taken == [pid]
    assert f"pid {os.getpid()} " in marker  # the taker owns its scratch now (never swept)
    assert again.verdict == "pass"
    assert kept_again == ([pid], [pid])
    assert crashed.kind == "crash" and KEPT_NOTE in crashed.gates["crash"].detail, crashed
    assert "exit status unknown" in crashed.gates["crash"].detail
    assert replaced.verdict == "pass" and new_pid != pid
    assert (client.workers_taken, client.workers_started) == (1, 1)
    assert pool.kept == [new_pid] and kept_pids(keeper_socket) == [new_pid]
    assert not os.path.exists(home)  # the killed worker's scratch went with it


def test_another_recipe_is_not_taken_and_a_dead_worker_is_never_handed_out(keeper_socket):
    async def go():
        first = await started_pool(keep_s=KEEP_S)
        await first.close()
        (pid,) = first.kept
        other = await started_pool(keep_s=KEEP_S, extra_env={"TORCH_KL_TEST": "another"})
        other_taken, other_pid = other.taken, other.clients[0].worker_pid
        await other.close()
        held = sorted(kept_pids(keeper_socket))
        home = next(w["home"] for w in keeper.list_kept(keeper_socket) if w["pid"] == pid)
        os.killpg(pid, signal.SIGKILL)  # a kept worker dies while kept
        await until(lambda: not alive(pid), "the kept worker to die")
        again = await started_pool(keep_s=KEEP_S)
        taken = again.taken
        verdict = await again.verify(REQUEST, timeout_s=180)
        await again.close()
        return pid, other_taken, other_pid, held, home, taken, verdict, again

    pid, other_taken, other_pid, held, home, taken, verdict, again = asyncio.run(go())
    assert other_taken == [] and other_pid != pid
    assert held == sorted([pid, other_pid])  # both kept, each of its own recipe
    assert taken == [] and verdict.verdict == "pass"
    assert again.clients[0].workers_started == 1
    assert pid not in kept_pids(keeper_socket)
    assert not os.path.exists(home)  # the keeper removed the dead worker's scratch


def test_a_worker_of_other_verifier_files_is_neither_taken_nor_kept(keeper_socket, tmp_path):
    """The verifier's files on disk are part of the recipe: after an edit, no worker
    started before it is taken, and one that started before it is not kept."""
    root = tmp_path / "tree"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "kernelladder", root / "kernelladder", ignore=skip)
    edited = root / "kernelladder" / "verifier" / "worker" / "options.py"

    async def go():
        before = await started_pool(keep_s=KEEP_S, package_root=str(root))
        await before.close()
        edited.write_text(edited.read_text() + "# an edit\n")
        after = await started_pool(keep_s=KEEP_S, package_root=str(root))
        taken, after_pid = after.taken, after.clients[0].worker_pid
        edited.write_text(edited.read_text() + "# another edit\n")
        await after.close()
        return before.kept, taken, after_pid, after.kept

    kept_before, taken, after_pid, kept_after = asyncio.run(go())
    assert len(kept_before) == 1 and taken == []
    assert kept_after == [] and not alive(after_pid)  # shut down as before
    assert kept_pids(keeper_socket) == kept_before


def test_keeping_off_shuts_the_workers_down_and_starts_no_keeper(keeper_socket):
    async def go():
        pool = await started_pool()
        client = pool.clients[0]
        pid, home = client.worker_pid, client._transport.home
        await pool.close()
        return pool, pid, home

    pool, pid, home = asyncio.run(go())
    assert pool.kept == [] and not alive(pid) and not os.path.exists(home)
    assert not os.path.exists(keeper_socket)  # no keeper (a worker template may listen beside)


def test_a_keeper_that_does_not_answer_costs_a_close_no_more_than_a_moment(keeper_socket):
    """A socket that is listened on but never answered (a keeper stuck, or not ours to
    reach): the worker is shut down as before, close() does not wait on it."""
    folder = os.path.dirname(keeper_socket)
    os.makedirs(folder, mode=0o700)
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(keeper_socket)
    mute.listen(8)
    try:

        async def go():
            pool = await started_pool(keep_s=KEEP_S)
            pid = pool.clients[0].worker_pid
            began = time.monotonic()
            await pool.close()
            return pool, pid, time.monotonic() - began

        pool, pid, closing_s = asyncio.run(go())
    finally:
        mute.close()
        os.unlink(keeper_socket)
    assert pool.kept == [] and not alive(pid)
    assert closing_s < 10  # only a hang would miss this (the keeper's part: 2 s at most)


def test_kept_workers_go_after_their_idle_time_and_the_keeper_with_them(keeper_socket):
    async def go():
        pool = await started_pool(keep_s=3.0)
        home = pool.clients[0]._transport.home
        await pool.close()
        return pool.kept, home

    (pid,), home = asyncio.run(go())
    answer, _ = keeper.request({"op": "list"}, path=keeper_socket)
    server = int(answer["pid"])
    deadline = time.monotonic() + 30
    while alive(pid) or os.path.exists(home) or os.path.exists(keeper_socket) or alive(server):
        assert time.monotonic() < deadline, "the idle worker, its scratch or the keeper stayed"
        time.sleep(0.05)
    assert keeper.list_kept(keeper_socket) is None


def test_a_pythonpath_that_names_the_package_root_already_is_the_same_recipe():
    """The CLI's own PYTHONPATH often names the checkout the workers import from: those
    workers are interchangeable with the ones of a caller whose PYTHONPATH does not."""
    from kernelladder.verifier.host.local_transport import LocalTransport, package_root

    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    plain = LocalTransport("cpu", environ=base)
    named = LocalTransport("cpu", environ={**base, "PYTHONPATH": package_root()})
    other = LocalTransport("cpu", environ={**base, "PYTHONPATH": "/somewhere/else"})
    assert plain.recipe_key() == named.recipe_key() != other.recipe_key()
