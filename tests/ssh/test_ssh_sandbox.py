"""The sandbox's walls on a remote worker: the SSH runner against a real OpenSSH server
on loopback, the worker on the "box" (this machine, the CPU interpreter) walled in by
the bootstrap's --sandbox, and `kernelladder doctor --remote` reporting the walls there.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import ROOT
from sshd_fixture import sshd  # noqa: F401 (fixture)

from kernelladder.engine.protocols import VerifyRequest
from kernelladder.engine.runners.ssh.pool import SSHRunner
from kernelladder.verifier.contract import sandbox, source_files

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


CHEATS = ROOT / "tests" / "cheats"
ABI, WHY_NOT = sandbox.landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 4, reason=f"Landlock ABI 4+ needed: {WHY_NOT or ABI}")


def cheat(name: str) -> str:
    return (CHEATS / f"{name}.py").read_text()


@needs_landlock
def test_remote_workers_are_walled_in(sshd, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("KERNELLADDER_SANDBOX", "require")
    box_home = Path(pwd.getpwnam(sshd.user).pw_dir)  # the caller's home on the box
    planted = box_home / "planted-by-candidate.txt"
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(60)
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()

    async def scenario() -> dict[str, object]:
        runner = SSHRunner(sshd.host_config(remote_dir=str(tmp_path / "remote")), device="cpu")
        await runner.start()
        try:
            hello = runner._hosts[0].hello
            tree = Path(runner._hosts[0].link.last_sync.tree_path) / "kernelladder"
            before = source_files.snapshot(str(tree))
            verdicts = {}
            sources = {
                name: cheat(name)
                for name in (
                    "wall_write_package",
                    "wall_write_home",
                    "wall_read_ssh",
                    "wall_read_parent_environ",
                    "honest_rmsnorm",
                )
            }
            sources["wall_connect"] = cheat("wall_connect").replace("PORT = 22", f"PORT = {port}")
            for name, source in sources.items():
                request = VerifyRequest(op="rmsnorm", source=source, device="cpu", timeout_s=180)
                verdicts[name] = await runner.verify(request)
            after = source_files.snapshot(str(tree))
            return {"hello": hello, "tree": tree, "before": before, "after": after, **verdicts}
        finally:
            await runner.close()

    try:
        got = asyncio.run(scenario())
    finally:
        server.close()
    assert str(got["hello"]["sandbox"]).startswith("on (Landlock ABI")
    assert got["before"] == got["after"], "the remote verifier's files changed"
    tree = got["tree"]
    walls = {
        "wall_write_package": f"write to {tree}/verifier/worker/gates.py",
        "wall_write_home": f"write to {planted}",
        "wall_read_ssh": f"read of {box_home}/.ssh/id_ed25519",
        "wall_read_parent_environ": "read of /proc/",
        "wall_connect": f"connect to 127.0.0.1:{port}",
    }
    for name, wall in walls.items():
        v = got[name]
        assert (v.verdict, v.gate) == ("fail", "anti-cheat"), (name, v.gates)
        detail = v.gates["anti-cheat"].detail
        assert detail.startswith(f"sandbox: {wall}") and detail.endswith("denied"), detail
        assert v.environment["sandbox"].startswith("on (Landlock ABI")
    assert got["honest_rmsnorm"].verdict == "pass"
    assert not accepted and not planted.exists()


@needs_landlock
def test_doctor_reports_the_walls_on_the_box(sshd, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("KL_")}
    env.update(
        KL_SSH_TARGET=f"{sshd.user}@127.0.0.1:{sshd.port}",
        KL_SSH_KEY=str(sshd.client_key_path),
        KL_SSH_KNOWN_HOSTS=str(sshd.known_hosts_path),
        KL_REMOTE_PYTHON=sys.executable,
        KL_REMOTE_DIR=str(tmp_path / "remote"),
        PYTHONPATH=str(ROOT),
    )
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--remote", "--device", "cpu", "--json"]
        + ["--sandbox", "require"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(result.stdout)
    found = {c["scope"]: c for c in report["checks"] if c["name"] == "sandbox"}
    assert set(found) == {"local", "127.0.0.1"}, report
    for check in found.values():
        assert check["status"] == "ok", check
        assert check["detail"].startswith(f"on (Landlock ABI {ABI}")
        assert "tried and denied: write outside, other /proc, tcp bind" in check["detail"]
