"""The app and SSH host keys, against a real OpenSSH server on loopback: an UNKNOWN key
is shown with its fingerprint and may be trusted (then the run starts); refusing ends
with the runner's one-line error; a CHANGED key is never offered, only reported.

The run is built from the command line exactly as `kernelladder-tui OP --remote ...`
builds it, verifying on the "remote" box's CPU (no GPU here), as the SSH tests do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import asyncssh
import pytest
from helpers import SIZE, asking, until
from sshd_fixture import SSHServer, sshd  # noqa: F401 (fixture)

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.modals.trust_host_key import TrustHostKeyScreen
from kernelladder.cli.tui import _make_live_run, build_parser
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events

pytestmark = pytest.mark.ssh


@pytest.fixture(autouse=True)
def _no_kl_env(monkeypatch):
    for name in [n for n in list(__import__("os").environ) if n.startswith("KL_")]:
        monkeypatch.delenv(name)


def remote_app(
    server: SSHServer, tmp_path: Path, known_hosts: Path, *, own_loop: bool = False
) -> tuple[KernelLadderApp, object]:
    args = build_parser().parse_args(
        ["rmsnorm", "--remote", "--device", "cpu", "--max-attempts", "1", "--branches", "1"]
        + ["--gate", "approve", "--run-dir", str(tmp_path / "run")]
        + ["--ssh-target", f"{server.user}@127.0.0.1:{server.port}"]
        + ["--ssh-key", str(server.client_key_path), "--known-hosts", str(known_hosts)]
        + ["--remote-python", sys.executable, "--remote-dir", str(tmp_path / "remote")]
    )
    run = _make_live_run(args)
    return KernelLadderApp(run=run, frozen=True, batch_interval=0.02, own_loop=own_loop), run


def notices(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def label_text(screen) -> str:
    return "\n".join(str(label.render()) for label in screen.query("Label"))


@pytest.mark.slow
@pytest.mark.parametrize("own_loop", [False, True], ids=["app-loop", "engine-thread"])
async def test_unknown_key_is_shown_trusted_and_the_run_starts(sshd, tmp_path, own_loop):  # noqa: F811
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    app, run = remote_app(sshd, tmp_path, known_hosts, own_loop=own_loop)
    fingerprint = sshd.host_key.get_fingerprint("sha256")
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: asking(app), "the modal", 60, pilot=pilot)
        await pilot.pause()
        shown = label_text(app.screen)
        assert fingerprint in shown and str(known_hosts) in shown
        assert "127.0.0.1" in shown and str(sshd.port) in shown
        assert known_hosts.read_text() == ""  # nothing trusted before the person says so
        await pilot.click("#yes")
        await until(lambda: app.screen is app.main, "the modal closed", pilot=pilot)
        await until(lambda: app.run_over, "the run's end", 240, pilot=pilot)
        await pilot.pause(0.2)
        assert not any("did not start" in line for line in notices(app)), notices(app)
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in known_hosts.read_text()
    events = read_events(run.run_dir)
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.runner.startswith("ssh:")
    assert any(isinstance(e, ev.VerdictReady) for e in events)
    assert events[-1].reason != ev.RULE_ERROR


async def test_refusing_an_unknown_key_ends_with_the_one_line_error(sshd, tmp_path):  # noqa: F811
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    app, run = remote_app(sshd, tmp_path, known_hosts)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: asking(app), "the modal", 60, pilot=pilot)
        await pilot.pause()
        await pilot.click("#no")
        await until(lambda: app.run_over, "the run's end", 60, pilot=pilot)
        await until(
            lambda: any("unknown host key" in n for n in notices(app)), "the error", 10, pilot=pilot
        )
        assert app.screen is app.main
    assert known_hosts.read_text() == ""
    finished = read_events(run.run_dir)[-1]
    assert finished.reason == ev.RULE_ERROR and "unknown host key" in finished.detail


async def test_a_changed_key_is_never_offered_only_reported(sshd, tmp_path):  # noqa: F811
    known_hosts = sshd.write_known_hosts(
        asyncssh.generate_private_key("ssh-ed25519"), tmp_path / "known_hosts"
    )
    before = known_hosts.read_text()
    app, run = remote_app(sshd, tmp_path, known_hosts)
    offered = []

    def over() -> bool:
        offered.extend(s for s in app.screen_stack if isinstance(s, TrustHostKeyScreen))
        return app.run_over

    async with app.run_test(size=SIZE) as pilot:
        await until(over, "the run's end", 60, pilot=pilot)
        await until(
            lambda: any("HOST KEY CHANGED" in n for n in notices(app)), "the error", 10, pilot=pilot
        )
        assert not offered and app.screen is app.main
    assert known_hosts.read_text() == before
    finished = read_events(run.run_dir)[-1]
    assert finished.reason == ev.RULE_ERROR and "HOST KEY CHANGED" in finished.detail
