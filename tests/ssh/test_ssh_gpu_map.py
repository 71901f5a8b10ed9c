"""GPU indices on a box whose login environment sets CUDA_VISIBLE_DEVICES (a shared box
giving this user some of its GPUs): the indices pick from that list. The mapping alone,
then end to end through a real sshd on loopback whose sessions get
CUDA_VISIBLE_DEVICES=4,5,6,7 (sshd's SetEnv): the remote worker (CPU device, no GPU here)
runs with the mapped value, a cuda run with an index outside it stops with one line, and
`doctor --remote` shows the mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from sshd_fixture import SSHServer, sshd, sshd_available  # noqa: F401 (fixture)

from kernelladder.cli.doctor_probes import FAIL, OK, WARN
from kernelladder.cli.doctor_remote import host_checks
from kernelladder.engine.runners.ssh.config import RemoteConfigError, physical_gpus
from kernelladder.engine.runners.ssh.link import RemoteError
from kernelladder.engine.runners.ssh.pool import SSHRunner

pytestmark = pytest.mark.ssh

SHARED = "4,5,6,7"


def test_indices_pick_from_the_visible_list():
    assert physical_gpus((0, 1), SHARED, where="box") == ("4", "5")
    assert physical_gpus((3, 0), " 4, 5,6,7 ", where="box") == ("7", "4")
    assert physical_gpus((0,), "GPU-1a2b,GPU-3c4d", where="box") == ("GPU-1a2b",)
    # not set: indices are physical
    assert physical_gpus((0, 5), None, where="box") == ("0", "5")


@pytest.mark.parametrize(
    ("gpus", "visible", "says"),
    [
        ((0, 4), SHARED, "GPU index 4 is outside the GPUs this login may use"),
        ((4, 5), "4,5", "GPU indices [4, 5] are"),
        ((0,), "", "no GPU for this login"),
    ],
)
def test_an_index_outside_the_list_is_one_line(gpus, visible, says):
    with pytest.raises(RemoteConfigError) as caught:
        physical_gpus(gpus, visible, where="box")
    message = str(caught.value)
    assert says in message and message.startswith("box: ") and "\n" not in message


@pytest.fixture(scope="module")
def shared_box(tmp_path_factory):
    """An sshd whose sessions get CUDA_VISIBLE_DEVICES=4,5,6,7, as a shared box's login."""
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    server = SSHServer(base=tmp_path_factory.mktemp("sshd-shared"))
    server.prepare()
    config = server.base / "sshd_config"
    lines = config.read_text().splitlines()
    lines = [
        f"{line} CUDA_VISIBLE_DEVICES={SHARED}" if line.startswith("SetEnv ") else line
        for line in lines
    ]
    config.write_text("\n".join(lines) + "\n")
    server.start()
    yield server
    server.stop()


def worker_environ(pid: int) -> dict[str, str]:
    """The environment the worker process runs with (the "box" is this machine)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


async def test_the_remote_worker_gets_the_mapped_device(shared_box, tmp_path):
    host = shared_box.host_config(remote_dir=str(tmp_path / "remote"), gpus=(1,))
    runner = SSHRunner(host, device="cpu")
    await runner.start()
    try:
        transport = runner._hosts[0].slots[0].transport
        assert transport.pgid  # the worker's pid (its own session), on the "box"
        assert worker_environ(transport.pgid)["CUDA_VISIBLE_DEVICES"] == "5"
        assert runner.describe()["hosts"][0]["physical_gpus"] == ["5"]
    finally:
        await runner.close()


async def test_a_cuda_run_with_an_index_outside_the_list_stops_at_start(shared_box, tmp_path):
    host = shared_box.host_config(remote_dir=str(tmp_path / "remote"), gpus=(0, 4))
    runner = SSHRunner(host, device="cuda")
    with pytest.raises(RemoteError) as caught:
        await runner.start()
    message = str(caught.value)
    assert "GPU index 4 is outside" in message and f"CUDA_VISIBLE_DEVICES={SHARED}" in message
    assert "\n" not in message


async def test_doctor_shows_the_box_list_and_the_mapping(shared_box, sshd, tmp_path):  # noqa: F811
    host = shared_box.host_config(remote_dir=str(tmp_path / "remote"), gpus=(0, 1))
    checks = {
        c.name: c for c in await host_checks(host, trust=False, interactive=False, device="cpu")
    }
    assert checks["gpu map"].status == OK
    assert checks["gpu map"].detail == f"CUDA_VISIBLE_DEVICES={SHARED}; gpus 0,1 -> physical 4,5"

    outside = shared_box.host_config(remote_dir=str(tmp_path / "remote"), gpus=(7,))
    checks = {
        c.name: c for c in await host_checks(outside, trust=False, interactive=False, device="cpu")
    }
    assert checks["gpu map"].status == WARN  # a CPU run uses no GPU
    checks = {c.name: c for c in await host_checks(outside, trust=False, interactive=False)}
    assert checks["gpu map"].status == FAIL and "GPU index 7 is outside" in checks["gpu map"].detail

    plain = sshd.host_config(remote_dir=str(tmp_path / "remote"), gpus=(0, 1))
    checks = {
        c.name: c for c in await host_checks(plain, trust=False, interactive=False, device="cpu")
    }
    assert checks["gpu map"].detail == "CUDA_VISIBLE_DEVICES not set; gpus 0,1 -> physical 0,1"
