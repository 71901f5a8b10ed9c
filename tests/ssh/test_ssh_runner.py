"""The SSH runner end to end against a real OpenSSH server on loopback, with real
verifier workers on the "remote" side (this machine's Python, the CPU interpreter):
a full check (through the docker double), a short optimize run, a hung candidate killed
on the box, a connection dropped mid-attempt (retried, recorded), a host that stays down
leaving a pool while the run goes on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import ROOT
from sshd_fixture import FAKE_CONTAINER, SSHServer, process_alive, sshd  # noqa: F401

from kernelladder.engine import create_run
from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.protocols import ProposerBase, RunnerLost, VerifyRequest
from kernelladder.engine.record import events as ev
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners.ssh.config import RemoteConfig
from kernelladder.engine.runners.ssh.pool import PoolRunner, SSHRunner
from kernelladder.ops.registry import start_path

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

RMSNORM = start_path("rmsnorm").read_text()
# the starting kernel, made slow enough that a test can act while it is being verified
SLOW_SUFFIX = (
    "\nimport time as _time\n_fast = kernel\n\n"
    "def kernel(x, weight):\n    _time.sleep(0.1)\n    return _fast(x, weight)\n"
)
SLOW_RMSNORM = RMSNORM + SLOW_SUFFIX
HANGS = "import time\n\ndef kernel(x, weight):\n    while True:\n        time.sleep(0.05)\n"


def remote_env(server: SSHServer, remote_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KL_")}
    env.update(
        KL_SSH_TARGET=f"{server.user}@127.0.0.1:{server.port}",
        KL_SSH_KEY=str(server.client_key_path),
        KL_SSH_KNOWN_HOSTS=str(server.known_hosts_path),
        KL_REMOTE_PYTHON=sys.executable,
        KL_REMOTE_DIR=str(remote_dir),
    )
    env.update(extra)
    return env


def test_check_through_ssh_in_a_container(sshd, tmp_path):  # noqa: F811
    candidate = tmp_path / "cand.py"
    candidate.write_text(RMSNORM)
    env = remote_env(sshd, tmp_path / "remote", KL_CONTAINER=FAKE_CONTAINER)
    before = len(sshd.docker_calls())
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "check", "rmsnorm", str(candidate)]
        + ["--remote", "--device", "cpu", "--json", "--timeout", "120"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "pass" and verdict["gates"]["correctness"]["status"] == "pass"
    assert verdict["gates"]["speed"]["status"] == "skipped"  # no GPU: no number invented
    # the worker ran through `docker exec -i kl-test sh -c ...` (bin/docker is a test double)
    calls = sshd.docker_calls()[before:]
    assert any(
        c[:3] == ["exec", "-i", FAKE_CONTAINER] and "kernelladder.verifier" in c[5] for c in calls
    )
    # and the verifier was synced under the remote dir by content hash
    assert (tmp_path / "remote" / ".manifest.json").is_file()


def test_check_with_an_unknown_host_key_is_one_line(sshd, tmp_path):  # noqa: F811
    candidate = tmp_path / "cand.py"
    candidate.write_text(RMSNORM)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    env = remote_env(sshd, tmp_path / "remote", KL_SSH_KNOWN_HOSTS=str(empty))
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "check", "rmsnorm", str(candidate)]
        + ["--remote", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "unknown host key" in result.stderr
    assert sshd.host_key.get_fingerprint("sha256") in result.stderr


async def test_hung_or_cancelled_candidate_is_killed_on_the_box(sshd, tmp_path):  # noqa: F811
    runner = SSHRunner(sshd.host_config(remote_dir=str(tmp_path / "remote")), device="cpu")
    await runner.start()
    try:
        transport = runner._hosts[0].slots[0].transport
        pgid = transport.pgid
        assert pgid and process_alive(pgid)
        verdict = await runner.verify(
            VerifyRequest(op="rmsnorm", source=HANGS, device="cpu", timeout_s=4)
        )
        assert verdict.kind == "timeout" and verdict.gate == "timeout"
        await gone(pgid)

        # a cancelled attempt (the run was stopped) leaves no candidate running either
        started = asyncio.Event()
        hanging = VerifyRequest(op="rmsnorm", source=HANGS, device="cpu", timeout_s=120)
        task = asyncio.ensure_future(runner.verify(hanging, lambda g, m: started.set()))
        await asyncio.wait_for(started.wait(), 60)
        pgid = runner._hosts[0].slots[0].transport.pgid
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await gone(pgid)
        request = VerifyRequest(op="rmsnorm", source=RMSNORM, device="cpu", timeout_s=120)
        assert (await runner.verify(request)).verdict == "pass"  # on a fresh worker
    finally:
        await runner.close()


async def gone(pgid: int) -> None:
    for _ in range(100):  # the kill runs over a second exec on the box
        if not process_alive(pgid):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"worker group {pgid} still runs on the box")


async def test_dropped_connection_mid_attempt_is_retried_and_recorded(sshd, tmp_path):  # noqa: F811
    runner = SSHRunner(
        sshd.host_config(remote_dir=str(tmp_path / "remote")),
        device="cpu",
        reconnect_delays_s=(0.2, 0.5, 1.0),
    )

    class SlowSearch(ProposerBase):
        """The real search proposer, each candidate slowed a little (a window in which
        to cut the link while it is being verified)."""

        name = "search"

        def __init__(self):
            self.inner = get_proposer("search")

        def strategies(self, op, k):
            return self.inner.strategies(op, k)

        async def propose(self, ctx):
            proposal = await self.inner.propose(ctx)
            return replace(proposal, source=proposal.source + SLOW_SUFFIX)

    options = RunOptions(
        op="rmsnorm",
        device="cpu",
        max_attempts=2,
        branches=1,
        gate="approve",
        run_dir=str(tmp_path / "run"),
        timeout_s=120,
    )
    run = create_run(options, runner=runner, proposer=SlowSearch())
    stale: list[int] = []

    async def cut_once():
        async for event in run.subscribe():
            if isinstance(event, ev.AttemptProgress) and event.gate == "correctness":
                stale.append(runner._hosts[0].slots[0].transport.pgid)
                assert sshd.drop_connections() >= 1
                return

    cutter = asyncio.ensure_future(cut_once())
    state = await asyncio.wait_for(run.run(), 240)
    await cutter
    events = [
        json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    ]
    kinds = [e["kind"] for e in events]
    retried = [e for e in events if e["kind"] == "attempt_retried"]
    assert len(retried) == 1 and "lost during the attempt" in retried[0]["reason"]
    attempt = retried[0]["attempt"]
    starts = [e for e in events if e["kind"] == "attempt_started" and e["attempt"] == attempt]
    assert [e["retry"] for e in starts] == [0, 1]
    assert {e["slot"] for e in starts} == {runner._hosts[0].slots[0].label}  # "host:gpu"
    verdicts = [e for e in events if e["kind"] == "verdict_ready"]
    assert {e["attempt"] for e in verdicts} == {1, 2} and all(
        e["verdict"] == "pass" for e in verdicts
    )
    assert any(e["kind"] == "notice" and "reconnected" in e["message"] for e in events)
    assert kinds[-1] == "run_finished" and state.finished
    assert stale and not process_alive(stale[0])  # the orphaned worker was killed after reconnect


async def test_a_host_that_stays_down_leaves_the_pool(sshd, tmp_path):  # noqa: F811
    second = SSHServer(base=Path(tempfile.mkdtemp(dir=tmp_path)))
    second.prepare()
    second.start()
    a = sshd.host_config(name="a", remote_dir=str(tmp_path / "ra"))
    b = second.host_config(name="b", remote_dir=str(tmp_path / "rb"))
    runner = PoolRunner(RemoteConfig(hosts=(a, b)), device="cpu", reconnect_delays_s=(0.1, 0.2))
    notices: list[tuple[str, str]] = []
    runner.set_notice_sink(lambda level, message: notices.append((level, message)))
    try:
        await runner.start()
        assert runner.slots == 2 and runner.live_hosts == ["a", "b"]
        second.stop()  # b goes down for good
        request = VerifyRequest(op="rmsnorm", source=RMSNORM, device="cpu", timeout_s=120)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append((await runner.verify(request)).verdict)
            except RunnerLost as exc:  # an attempt that was on b when it dropped
                outcomes.append(f"lost: {exc}")
        assert outcomes[-1] == "pass" and outcomes.count("pass") >= 2
        assert runner.live_hosts == ["a"] and runner.slots == 1
        assert any(level == "error" and "b left the pool" in m for level, m in notices)
    finally:
        await runner.close()
        second.stop()


def test_optimize_remote_end_to_end(sshd, tmp_path):  # noqa: F811
    env = remote_env(sshd, tmp_path / "remote")
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "optimize", "rmsnorm", "--remote"]
        + ["--device", "cpu", "--max-attempts", "2", "--branches", "1", "--gate", "approve"]
        + ["--run-dir", str(tmp_path / "run"), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["attempts"]["judged"] == 2 and summary["attempts"]["passed"] == 2
    started = json.loads((tmp_path / "run" / "events.jsonl").read_text().splitlines()[0])
    assert started["kind"] == "run_started" and started["runner"].startswith("ssh:")
    assert started["settings"]["remote"] is True


_EAGER_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from kernelladder.engine.protocols import RunnerLost, VerifyRequest
from kernelladder.engine.runners.ssh.config import HostConfig, SSHTarget
from kernelladder.engine.runners.ssh.pool import SSHRunner

cfg = json.loads(sys.argv[1])
host = HostConfig(
    target=SSHTarget("127.0.0.1", cfg["user"], cfg["port"]), key=Path(cfg["key"]),
    known_hosts=Path(cfg["known_hosts"]), python=cfg["python"], remote_dir=cfg["remote_dir"],
)
source = Path(cfg["candidate"]).read_text()
slow_source = Path(cfg["slow_candidate"]).read_text()

async def main():
    asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    runner = SSHRunner(host, device="cpu", reconnect_delays_s=(0.2, 0.5))
    out = []
    await runner.start()
    request = VerifyRequest(op="rmsnorm", source=source, device="cpu", timeout_s=120)
    out.append((await runner.verify(request)).verdict)
    progressed = asyncio.Event()
    slow = VerifyRequest(op="rmsnorm", source=slow_source, device="cpu", timeout_s=120)
    task = asyncio.ensure_future(runner.verify(slow, lambda g, m: progressed.set()))
    await progressed.wait()
    print("DROP", flush=True)
    sys.stdin.readline()  # the test has cut the link
    try:
        out.append((await task).verdict)
    except RunnerLost:
        out.append("lost")
    out.append((await runner.verify(request)).verdict)
    await runner.close()
    print(json.dumps(out), flush=True)

asyncio.run(main())
"""


def _python312_with_asyncssh() -> str | None:
    import glob
    import shutil

    candidates = [
        shutil.which("python3.12"),
        *glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12"),
    ]
    for python in filter(None, candidates):
        ok = subprocess.run([python, "-c", "import asyncssh"], capture_output=True, timeout=60)
        if ok.returncode == 0:
            return python
    return None


def test_runner_under_python312_eager_tasks(sshd, tmp_path):  # noqa: F811
    # Textual's run_async installs asyncio's eager task factory on Python >= 3.12; the SSH
    # runner must work under it (connect, verify, a dropped link, reconnect).
    python = _python312_with_asyncssh()
    if python is None:
        pytest.skip("no python3.12 with asyncssh here (python3.12 -m pip install asyncssh)")
    candidate = tmp_path / "cand.py"
    candidate.write_text(RMSNORM)
    slow_candidate = tmp_path / "slow.py"
    slow_candidate.write_text(SLOW_RMSNORM)
    cfg = {
        "user": sshd.user,
        "port": sshd.port,
        "key": str(sshd.client_key_path),
        "known_hosts": str(sshd.known_hosts_path),
        "python": sys.executable,  # the worker's side keeps this machine's torch
        "remote_dir": str(tmp_path / "remote"),
        "candidate": str(candidate),
        "slow_candidate": str(slow_candidate),
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [python, "-c", _EAGER_SCRIPT, json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "DROP"
        assert sshd.drop_connections() >= 1
        proc.stdin.write("\n")
        proc.stdin.flush()
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert json.loads(stdout.strip().splitlines()[-1]) == ["pass", "lost", "pass"]


async def test_workers_sharing_a_remote_gpu_take_turns_through_its_arbiter(sshd, tmp_path):  # noqa: F811
    """A pipelined verification over SSH: two workers on the box's one "GPU" (the CPU
    interpreter here), each stage asked of the GPU's arbiter on this side."""
    host = sshd.host_config(remote_dir=str(tmp_path / "remote"))
    runner = SSHRunner(host, device="cpu", per_gpu=2)
    await runner.start()
    try:
        assert runner.slots == 2 and [s.label for s in runner._hosts[0].slots] == [
            f"{host.label}:0/0",
            f"{host.label}:0/1",
        ]
        arbiters = {id(s.client.arbiter) for s in runner._hosts[0].slots}
        assert len(arbiters) == 1  # one GPU, one arbiter
        lines: list[tuple[str, str]] = []
        slots: list[str] = []
        requests = [
            VerifyRequest(op="rmsnorm", source=src, device="cpu", timeout_s=120, pipeline=True)
            for src in (RMSNORM, "# autotune\n" + RMSNORM)  # the second: correctness alone
        ]
        verdicts = await asyncio.gather(
            *(
                runner.verify(r, lambda g, m: lines.append((g, m)), on_slot=slots.append)
                for r in requests
            )
        )
        assert [v.verdict for v in verdicts] == ["pass", "pass"]
        assert sorted(slots) == [f"{host.label}:0/0", f"{host.label}:0/1"]
        assert all(set(v.stages) >= {"compile", "correctness"} for v in verdicts)
        assert any(g == "compile" for g, _ in lines)
        arbiter = runner._hosts[0].slots[0].client.arbiter
        assert arbiter.holders == (0, False)
    finally:
        await runner.close()
