"""`kernelladder doctor [--remote]` against this machine and a real sshd on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncssh
import pytest
from sshd_fixture import FAKE_CONTAINER, sshd  # noqa: F401 (fixture)

from kernelladder.cli.doctor import FAIL, OK, all_ok
from kernelladder.cli.doctor_remote import host_checks

pytestmark = pytest.mark.ssh


def by_name(checks):
    return {c.name: c for c in checks}


def test_doctor_remote_cli_json(sshd, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("KL_")}
    env.update(
        KL_SSH_TARGET=f"{sshd.user}@127.0.0.1:{sshd.port}",
        KL_SSH_KEY=str(sshd.client_key_path),
        KL_SSH_KNOWN_HOSTS=str(sshd.known_hosts_path),
        KL_REMOTE_PYTHON=sys.executable,
        KL_REMOTE_DIR=str(tmp_path / "remote"),
    )
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--remote", "--device", "cpu", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(result.stdout)
    remote = {c["name"]: c for c in report["checks"] if c["scope"] == "127.0.0.1"}
    local = {c["name"]: c for c in report["checks"] if c["scope"] == "local"}
    assert result.returncode == 0 and report["ok"], result.stdout
    assert local["torch"]["status"] == OK and local["triton"]["status"] == OK
    assert remote["ssh"]["status"] == OK and "round trip" in remote["ssh"]["detail"]
    assert remote["torch"]["status"] == OK and remote["python"]["status"] == OK
    assert "absent" in remote["remote dir"]["detail"]  # nothing synced yet
    # a cuda run needs the configured GPU: this box has none, so that is a failure
    cuda = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--remote", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert cuda.returncode == 1
    gpus = next(
        c
        for c in json.loads(cuda.stdout)["checks"]
        if c["name"] == "gpus" and c["scope"] != "local"
    )
    assert gpus["status"] == FAIL


async def test_doctor_container_ok_and_missing(sshd, tmp_path):  # noqa: F811
    # bin/docker on the server is a test double (no docker engine runs here)
    good = await host_checks(
        sshd.host_config(container=FAKE_CONTAINER, remote_dir=str(tmp_path / "r")),
        trust=False,
        interactive=False,
        device="cpu",
    )
    assert by_name(good)["container"].status == OK and all_ok(good)
    bad = await host_checks(
        sshd.host_config(container="no-such", remote_dir=str(tmp_path / "r")),
        trust=False,
        interactive=False,
        device="cpu",
    )
    assert (
        by_name(bad)["container"].status == FAIL
        and "No such container" in by_name(bad)["container"].detail
    )
    assert not all_ok(bad)


async def test_doctor_trusts_an_unknown_key_but_never_a_changed_one(sshd, tmp_path):  # noqa: F811
    unknown = tmp_path / "known_hosts"
    unknown.write_text("")
    checks = await host_checks(
        sshd.host_config(known_hosts=unknown, remote_dir=str(tmp_path / "r")),
        trust=True,
        interactive=False,
        device="cpu",
    )
    fingerprint = sshd.host_key.get_fingerprint("sha256")
    assert (
        by_name(checks)["host key"].status == OK
        and fingerprint in by_name(checks)["host key"].detail
    )
    assert by_name(checks)["ssh"].status == OK
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in unknown.read_text()

    changed = sshd.write_known_hosts(asyncssh.generate_private_key("ssh-ed25519"), tmp_path / "kh2")
    before = changed.read_text()
    checks = await host_checks(
        sshd.host_config(known_hosts=changed, remote_dir=str(tmp_path / "r")),
        trust=True,
        interactive=False,
        device="cpu",
    )
    assert (
        by_name(checks)["ssh"].status == FAIL
        and "HOST KEY CHANGED" in by_name(checks)["ssh"].detail
    )
    assert changed.read_text() == before


def test_doctor_bad_remote_setting_is_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KL_")}
    env["KL_SSH_TARGET"] = "me@host:99999"
    result = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--remote"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "bad port" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
