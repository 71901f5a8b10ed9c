"""Workers started ahead of their run (pool.start_ahead): a GPU run's CLI spawns them
before it imports torch and loads the op, so their start overlaps its own; the pool
claims them by recipe as it starts (the same processes: none spawned twice), and kills
those it does not claim, as does the CLI when the run fails to build. Real worker
processes on the CPU (Triton's interpreter): start_ahead takes the device it is given,
so the mechanics run here; which device a run starts ahead for is tested apart."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from helpers import CHEATS

from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners import local
from kernelladder.verifier.contract.scratch import owner_alive, process_start_time
from kernelladder.verifier.host import pool as pool_mod
from kernelladder.verifier.host.pool import LocalPool, discard_unclaimed, start_ahead

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()


def alive(pid: int) -> bool:
    return owner_alive(pid, process_start_time(pid))


def test_a_worker_spawned_ahead_is_the_one_the_pool_starts_and_it_verifies():
    (ahead,) = start_ahead("cpu", 1, 1)
    pid = ahead.pid
    assert pid and alive(pid)

    async def go():
        pool = LocalPool("cpu", 1)
        await pool.start()
        client = pool.clients[0]
        verdict = await pool.verify(
            {"op": "rmsnorm", "source": HONEST, "device": "cpu"}, timeout_s=180
        )
        started = client.workers_started
        used = client.worker_pid
        await pool.close()
        return used, started, verdict.verdict

    used, started, verdict = asyncio.run(go())
    assert used == pid and started == 1 and verdict == "pass"
    assert not pool_mod._AHEAD


def test_a_worker_of_another_recipe_is_not_claimed_and_goes():
    """Started ahead for another environment than the run's (as a wrong guess of the
    device would be): the pool kills it and starts its own."""
    (ahead,) = start_ahead("cpu", 1, 1, extra_env={"KL_TEST_OTHER_RECIPE": "1"})
    pid, home = ahead.pid, ahead.home
    assert alive(pid) and home and Path(home).is_dir()

    async def go():
        pool = LocalPool("cpu", 1)
        await pool.start()
        used = pool.clients[0].worker_pid
        await pool.close()
        return used

    used = asyncio.run(go())
    assert used != pid and not alive(pid) and not Path(home).exists()


def test_unclaimed_workers_are_killed_when_the_run_does_not_start():
    transports = start_ahead("cpu", 1, 2)
    pids = [t.pid for t in transports]
    homes = [t.home for t in transports]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    discard_unclaimed()
    assert not any(alive(p) for p in pids)
    assert not any(Path(h).exists() for h in homes if h)


def test_the_cli_kills_them_when_the_run_fails_to_build(monkeypatch, tmp_path):
    """A GPU run asked for on a machine whose driver lists a GPU: started ahead, then the
    run stops with a usage line (here: an unknown op), and the workers go with it."""
    from kernelladder.cli import optimize

    started: list = []

    def ahead(options):
        started.extend(start_ahead("cpu", 1, 1))
        return len(started)

    # the CLI reaches it through the engine's door, which keeps a name once looked up:
    # patched there, whichever test looked it up first
    import kernelladder.engine as engine

    monkeypatch.setattr(engine, "start_workers_ahead", ahead, raising=False)
    parser = argparse.ArgumentParser()
    optimize.add_run_arguments(parser)
    args = parser.parse_args(["no-such-op", "--device", "cpu", "--run-dir", str(tmp_path / "r")])
    try:
        optimize.build_run(args, interactive=False)
    except optimize.UsageError:
        pass
    else:  # pragma: no cover - the op does not exist
        raise AssertionError("an unknown op built a run")
    assert started and not alive(started[0].pid)
    assert not pool_mod._AHEAD


def test_the_gpus_a_run_starts_ahead_for_are_read_without_torch(tmp_path, monkeypatch):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    for bus in ("0000:19:00.0", "0000:3b:00.0"):
        (gpus / bus).mkdir()
    monkeypatch.setattr(local, "NVIDIA_GPUS", str(gpus))
    assert local.gpus_without_torch({}) == 2
    assert local.gpus_without_torch({"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert local.gpus_without_torch({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert local.gpus_without_torch({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    monkeypatch.setattr(local, "NVIDIA_GPUS", str(tmp_path / "no-driver"))
    assert local.gpus_without_torch({}) == 0


def test_cpu_remote_and_ray_runs_start_nothing_ahead(monkeypatch):
    calls: list = []
    monkeypatch.setattr(pool_mod, "start_ahead", lambda *a, **k: calls.append(a) or [])
    monkeypatch.setattr(local, "gpus_without_torch", lambda environ=None: 1)
    assert local.start_workers_ahead(RunOptions(op="rmsnorm", device="cpu")) == 0
    assert local.start_workers_ahead(RunOptions(op="rmsnorm", remote=True)) == 0
    assert local.start_workers_ahead(RunOptions(op="rmsnorm", ray_address="local")) == 0
    assert calls == []
    # a machine whose driver lists no GPU and no --device: nothing either
    monkeypatch.setattr(local, "gpus_without_torch", lambda environ=None: 0)
    assert local.start_workers_ahead(RunOptions(op="rmsnorm")) == 0
    # a GPU run: its workers per GPU (one per branch, at most 3), on every GPU listed
    monkeypatch.setattr(local, "gpus_without_torch", lambda environ=None: 2)
    local.start_workers_ahead(RunOptions(op="rmsnorm", device="cuda", branches=2, keep_workers_s=0))
    assert calls == [("cuda", 2, 2, 0.0)]
