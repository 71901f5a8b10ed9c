"""The SSH link against a real OpenSSH server on loopback: sync by content hash, host
keys (unknown, changed, trusted), key-only auth, and quoting of every configured value."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import asyncssh
import pytest
from sshd_fixture import FAKE_CONTAINER, sshd  # noqa: F401 (fixture)

from kernelladder.engine.runners.ssh.config import SSHTarget
from kernelladder.engine.runners.ssh.link import (
    HostKeyError,
    HostLink,
    RemoteError,
    trust_host_key,
    worker_command,
)
from kernelladder.engine.runners.ssh.sync import (
    MANIFEST_NAME,
    local_manifest,
    package_root,
    tree_id,
)

pytestmark = pytest.mark.ssh


def copy_package(dest: Path) -> Path:
    """The synced part of the package, in a scratch tree a test may edit."""
    root = dest / "kernelladder"
    src = package_root()
    root.mkdir(parents=True)
    shutil.copy2(src / "__init__.py", root / "__init__.py")
    for sub in ("ops", "verifier"):
        shutil.copytree(src / sub, root / sub, ignore=shutil.ignore_patterns("__pycache__"))
    return root


async def connected(sshd, **changes) -> HostLink:  # noqa: F811
    root = changes.pop("root", None)
    link = HostLink(sshd.host_config(**changes), root=root)
    await link.connect()
    return link


def test_the_box_gets_the_worker_and_the_contract_not_the_callers_side():
    verifier = {p for p in local_manifest() if p.startswith("kernelladder/verifier/")}
    assert {
        "kernelladder/verifier/__init__.py",
        "kernelladder/verifier/worker/__main__.py",  # python -m kernelladder.verifier.worker
        "kernelladder/verifier/contract/protocol.py",
        "kernelladder/verifier/contract/env.py",  # the bootstrap's imports
        "kernelladder/verifier/contract/scratch.py",
    } <= verifier
    assert not [p for p in verifier if p.startswith("kernelladder/verifier/host/")]


async def test_sync_sends_only_what_changed(sshd, tmp_path):  # noqa: F811
    root = copy_package(tmp_path / "local")
    link = HostLink(sshd.host_config(remote_dir=str(tmp_path / "remote")), root=root)
    await link.connect()
    try:
        first = await link.sync()
        n = len(local_manifest(root))
        assert first.files_total == n and first.files_sent == n and first.bytes_sent > 0

        second = await link.sync()
        assert second.files_sent == 0 and second.bytes_sent == 0 and second.tree == first.tree

        (root / "ops" / "spec.py").write_text((root / "ops" / "spec.py").read_text() + "\n# x\n")
        third = await link.sync()
        assert third.files_sent == 1 and third.tree != first.tree
        # the earlier tree is untouched (a worker may still be running from it)
        assert (
            Path(first.tree_path, "kernelladder/ops/spec.py").read_text()
            == (package_root() / "ops" / "spec.py").read_text()
        )
        assert Path(third.tree_path, "kernelladder/ops/spec.py").read_text().endswith("# x\n")

        pointer = json.loads((tmp_path / "remote" / MANIFEST_NAME).read_text())
        assert pointer["tree"] == third.tree == tree_id(local_manifest(root))
        assert pointer["files"] == local_manifest(root)
        state = await link.sync_state()
        assert state["in_sync"] and state["would_send"] == 0
    finally:
        await link.close()


async def test_an_interrupted_sync_never_leaves_a_partial_tree(sshd, tmp_path):  # noqa: F811
    link = HostLink(sshd.host_config(remote_dir=str(tmp_path / "remote")))
    await link.connect()
    try:
        manifest = local_manifest()
        tree = tmp_path / "remote" / "trees" / tree_id(manifest)
        for delay in (0.005, 0.01, 0.02, 0.04):
            task = asyncio.ensure_future(link.sync())
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises((asyncio.CancelledError, RemoteError)):
                await task
            if tree.exists():  # only ever whole
                for rel, _ in manifest.items():
                    assert (tree.parent / tree.name / rel).is_file()
        result = await link.sync()
        assert result.tree_path == str(tree)
        assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()) == sorted(
            [*manifest, MANIFEST_NAME]
        )
    finally:
        await link.close()


async def test_unknown_host_key_stops_with_fingerprint(sshd, tmp_path):  # noqa: F811
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyError) as info:
        await connected(sshd, known_hosts=empty)
    fingerprint = sshd.host_key.get_fingerprint("sha256")
    message = str(info.value)
    assert not info.value.changed and info.value.fingerprint == fingerprint
    assert "unknown host key" in message and fingerprint in message and "\n" not in message

    # a missing known_hosts file trusts nothing (it never means "accept any key")
    with pytest.raises(HostKeyError, match="unknown host key"):
        await connected(sshd, known_hosts=tmp_path / "absent")

    # after a person checked the fingerprint, trusting it lets the link connect
    trust_host_key(empty, "127.0.0.1", sshd.port, info.value.key)
    link = await connected(sshd, known_hosts=empty, remote_dir=str(tmp_path / "r"))
    assert link.connected
    await link.close()


async def test_changed_host_key_is_a_hard_stop(sshd, tmp_path):  # noqa: F811
    impostor = asyncssh.generate_private_key("ssh-ed25519")
    recorded = sshd.write_known_hosts(impostor, tmp_path / "known_hosts")
    with pytest.raises(HostKeyError) as info:
        await connected(sshd, known_hosts=recorded)
    message = str(info.value)
    assert info.value.changed and "HOST KEY CHANGED" in message
    assert sshd.host_key.get_fingerprint("sha256") in message and "refusing" in message


async def test_wrong_key_is_refused_without_fallback(sshd, tmp_path):  # noqa: F811
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "stranger"
    stranger.write_private_key(str(path))
    with pytest.raises(RemoteError, match="key authentication failed"):
        await connected(sshd, key=path)


async def test_unreachable_host_is_one_line(sshd, tmp_path):  # noqa: F811
    closed = SSHTarget("127.0.0.1", sshd.user, 1)  # nothing listens on port 1
    with pytest.raises(RemoteError, match="cannot reach"):
        await connected(sshd, target=closed)


async def test_round_trip_and_run(sshd, tmp_path):  # noqa: F811
    link = await connected(sshd, remote_dir=str(tmp_path / "r"))
    try:
        rtt = await link.round_trip_s()
        assert 0 < rtt < 5
        result = await link.run("echo $((6 * 7))")
        assert result.stdout.strip() == "42"
    finally:
        await link.close()


async def read_first_line(link: HostLink, command: str) -> str:
    """The worker bootstrap's first line (its process group); then the group is killed."""
    async with link.conn.create_process(command) as process:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        await link.kill_group(json.loads(line)["pgid"])
        await asyncio.wait_for(process.wait(), 30)
        assert process.exit_signal is not None and process.exit_signal[0] == "KILL"
        return line


async def test_shell_metacharacters_in_config_do_not_inject(sshd, tmp_path):  # noqa: F811
    pwned = tmp_path / "pwned"
    hostile_dir = f"{tmp_path}/x; touch {pwned}; echo $(touch {pwned}2)"
    link = await connected(sshd, remote_dir=hostile_dir)
    try:
        result = await link.sync()
        assert result.tree_path.startswith(hostile_dir)  # the directory is literally named so
        line = await read_first_line(link, link.worker_command(gpu="0", device="cpu").command)
        assert json.loads(line)["type"] == "kl-pgid"  # the bootstrap ran from that tree
        assert not pwned.exists() and not Path(f"{pwned}2").exists()
    finally:
        await link.close()


async def test_hostile_container_name_reaches_docker_as_one_argument(sshd, tmp_path):  # noqa: F811
    # load_remote_config rejects this name (test_ssh_config); built directly, it must
    # still reach `docker` as one inert argument. bin/docker is a test double (no engine).
    pwned = tmp_path / "pwned"
    hostile = f"kl$(touch {pwned})`touch {pwned}`"
    link = await connected(sshd, remote_dir=str(tmp_path / "r"), container=hostile)
    try:
        await link.sync()
        command = link.worker_command(gpu="0", device="cpu").command
        async with link.conn.create_process(command) as process:
            stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert "No such container" in stderr and not pwned.exists()
        assert sshd.docker_calls()[-1][:3] == ["exec", "-i", hostile]
    finally:
        await link.close()


async def test_container_wraps_the_worker_in_docker_exec(sshd, tmp_path):  # noqa: F811
    link = await connected(sshd, remote_dir=str(tmp_path / "r"), container=FAKE_CONTAINER)
    try:
        sync = await link.sync()
        before = len(sshd.docker_calls())
        line = await read_first_line(link, link.worker_command(gpu="3", device="cpu").command)
        call = sshd.docker_calls()[before]
        assert call[:4] == ["exec", "-i", FAKE_CONTAINER, "sh"] and call[4] == "-c"
        assert call[5].startswith(f"cd {sync.tree_path} && exec {sys.executable} -c ")
        assert "import os, sys, tempfile" in call[5]  # the bootstrap, as one quoted word
        assert call[5].endswith(f" {sync.tree_path} 3 cpu auto")  # auto: the --sandbox mode
        pgid = json.loads(line)["pgid"]
        assert pgid > 0
    finally:
        await link.close()


def test_worker_command_quotes_every_value(sshd):  # noqa: F811
    host = sshd.host_config(container="c'; rm -rf /; '")
    command = worker_command(
        host, python="/opt/py thon", tree_path="/t/$(x)", gpu="0", device="cpu"
    )
    assert "'/opt/py thon'" in command and "$(x)" in command
    import shlex

    argv = shlex.split(command)  # the login shell sees exactly these words
    assert argv[:5] == ["exec", "docker", "exec", "-i", "c'; rm -rf /; '"]
    inner = shlex.split(argv[7])
    assert inner[:2] == ["cd", "/t/$(x)"] and inner[4] == "/opt/py thon"
    assert inner[5] == "-c" and len(inner) == 11
    assert inner[-4:] == ["/t/$(x)", "0", "cpu", "auto"]  # auto: the worker's --sandbox
