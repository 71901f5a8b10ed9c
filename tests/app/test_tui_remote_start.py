"""The app starts a `--remote` run's runner ONCE: the early start it makes to ask about an
unknown host key is the run's start. A start that fails (a box that drops the link,
refused authentication, no python on the box) connects once and its one-line error is
shown once and recorded in events.jsonl as the run's own start failure; one that
succeeds is reused by the run, not started again.

Connections are counted by a real loopback TCP endpoint in front of the box: it either
closes each connection at once or relays it to the real OpenSSH server of the SSH tests.
The run is built from the command line as `kernelladder-tui OP --remote ...` builds it.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from pathlib import Path

import asyncssh
import pytest
from helpers import SIZE, asking, until
from sshd_fixture import SSHServer, sshd  # noqa: F401 (fixture)

from kernelladder.app.app import KernelLadderApp
from kernelladder.cli.tui import _make_live_run, build_parser
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events

DID_NOT_START = "the runner did not start: "


@pytest.fixture(autouse=True)
def _no_kl_env(monkeypatch):
    for name in [n for n in list(__import__("os").environ) if n.startswith("KL_")]:
        monkeypatch.delenv(name)


class CountingEndpoint:
    """A loopback TCP endpoint that counts the connections made to it and closes each at
    once (upstream None: a box whose sshd drops every client) or relays it, byte for
    byte, to the port `upstream`."""

    def __init__(self, upstream: int | None = None) -> None:
        self.upstream = upstream
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # so the accept loop sees close()
        self.port = self._listener.getsockname()[1]
        self._open = True
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._open:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            if self.upstream is None:
                client.close()
                continue
            client.settimeout(None)
            box = socket.create_connection(("127.0.0.1", self.upstream))
            self._sockets += [client, box]
            for source, sink in ((client, box), (box, client)):
                threading.Thread(target=_relay, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._open = False
        self._thread.join(5)
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


def _relay(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def endpoint():
    made: list[CountingEndpoint] = []

    def make(upstream: int | None = None) -> CountingEndpoint:
        made.append(CountingEndpoint(upstream))
        return made[-1]

    yield make
    for e in made:
        e.close()


def remote_app(
    tmp_path: Path,
    *,
    port: int,
    user: str,
    key: Path,
    known_hosts: Path,
    python: str = sys.executable,
    own_loop: bool = False,
) -> tuple[KernelLadderApp, object]:
    args = build_parser().parse_args(
        ["rmsnorm", "--remote", "--device", "cpu", "--max-attempts", "1", "--branches", "1"]
        + ["--gate", "approve", "--run-dir", str(tmp_path / "run")]
        + ["--ssh-target", f"{user}@127.0.0.1:{port}"]
        + ["--ssh-key", str(key), "--known-hosts", str(known_hosts)]
        + ["--remote-python", python, "--remote-dir", str(tmp_path / "remote")]
    )
    run = _make_live_run(args)
    return KernelLadderApp(run=run, frozen=True, batch_interval=0.02, own_loop=own_loop), run


def relayed_app(
    sshd: SSHServer,  # noqa: F811
    relay: CountingEndpoint,
    tmp_path: Path,
    trusted: asyncssh.SSHKey | None = None,
    **changes,
):
    """The app against the real sshd through `relay`; known_hosts holds `trusted` (by
    default the box's own key) at the relay's address, the one the runner connects to."""
    known_hosts = tmp_path / "known_hosts"
    public = (trusted or sshd.host_key).export_public_key().decode()
    known_hosts.write_text(f"[127.0.0.1]:{relay.port} {public}")
    values = dict(port=relay.port, user=sshd.user, key=sshd.client_key_path)
    values.update(changes)
    return remote_app(tmp_path, known_hosts=known_hosts, **values)


def start_errors(app) -> list[str]:
    """The error toasts that say the runner did not start. The run's end repeats that
    error as its detail, so the app shows one toast for both: "run finished: error"."""
    return [
        n.message
        for n in app._notifications
        if n.severity == "error" and DID_NOT_START in n.message
    ]


def finish_toasts(app) -> list[str]:
    return [n.message for n in app._notifications if n.title.startswith("run finished")]


async def failed_once(app, run, endpoint: CountingEndpoint) -> str:
    """Drives the app to the run's end; checks one connection, the error shown once and
    recorded once, as the run's own start failure records it. Returns the error."""
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.run_over, "the run's end", 60, pilot=pilot)
        await until(lambda: start_errors(app), "the error on screen", 10, pilot=pilot)
        await pilot.pause(0.2)
        shown, ended = start_errors(app), finish_toasts(app)
        all_toasts = [n.message for n in app._notifications]
        assert app.screen is app.main
    assert endpoint.connections == 1
    assert len(shown) == 1, shown
    events = read_events(run.run_dir)
    said = [e for e in events if isinstance(e, ev.Notice) and DID_NOT_START in e.message]
    assert len(said) == 1 and said[0].level == "error"
    error = said[0].message
    assert "\n" not in error and shown == [error] and ended == [error]
    assert all_toasts.count(error) == 1  # the Notice and the run's end: one toast
    assert any(isinstance(e, ev.RunStarted) and e.runner.startswith("ssh:") for e in events)
    assert not any(isinstance(e, ev.AttemptStarted) for e in events)
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert finished.reason == ev.RULE_ERROR and finished.detail == error
    return error


@pytest.mark.parametrize("own_loop", [False, True], ids=["app-loop", "engine-thread"])
async def test_a_box_that_drops_the_connection_is_tried_once(tmp_path, endpoint, own_loop):
    box = endpoint()  # closes every connection at once
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    key = tmp_path / "client_ed25519"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    key.chmod(0o600)
    app, run = remote_app(
        tmp_path, port=box.port, user="nobody", key=key, known_hosts=known_hosts, own_loop=own_loop
    )
    error = await failed_once(app, run, box)
    assert f"127.0.0.1:{box.port}" in error


@pytest.mark.ssh
async def test_a_refused_key_is_tried_once(sshd, tmp_path, endpoint):  # noqa: F811
    relay = endpoint(sshd.port)
    stranger = tmp_path / "stranger_ed25519"  # a key the box does not authorize
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    stranger.chmod(0o600)
    app, run = relayed_app(sshd, relay, tmp_path, key=stranger)
    error = await failed_once(app, run, relay)
    assert "key authentication failed" in error


@pytest.mark.ssh
async def test_a_box_without_the_python_is_tried_once(sshd, tmp_path, endpoint):  # noqa: F811
    relay = endpoint(sshd.port)
    missing = str(tmp_path / "no-such-python")
    app, run = relayed_app(sshd, relay, tmp_path, python=missing)
    error = await failed_once(app, run, relay)
    assert "no-such-python" in error or "python" in error.lower(), error


@pytest.mark.ssh
@pytest.mark.parametrize("case", ["refused", "changed"])
async def test_a_host_key_not_trusted_is_tried_once(sshd, tmp_path, endpoint, case):  # noqa: F811
    relay = endpoint(sshd.port)
    if case == "refused":  # an unknown key the person does not trust
        app, run = relayed_app(sshd, relay, tmp_path)
        (tmp_path / "known_hosts").write_text("")
    else:  # a changed key: never offered
        app, run = relayed_app(sshd, relay, tmp_path, asyncssh.generate_private_key("ssh-ed25519"))
    async with app.run_test(size=SIZE) as pilot:
        if case == "refused":
            await until(lambda: asking(app), "the modal", 60, pilot=pilot)
            await pilot.pause()
            await pilot.click("#no")
        await until(lambda: app.run_over, "the run's end", 60, pilot=pilot)
        await until(lambda: start_errors(app), "the error on screen", 10, pilot=pilot)
        await pilot.pause(0.2)
        assert len(start_errors(app)) == 1, start_errors(app)
    # one start: its connection, then the key fetch that tells unknown from changed
    assert relay.connections == 2
    said = [e for e in read_events(run.run_dir) if isinstance(e, ev.Notice)]
    assert [e.message for e in said if DID_NOT_START in e.message] == start_errors(app)
    assert ("unknown host key" if case == "refused" else "HOST KEY CHANGED") in said[-1].message


@pytest.mark.ssh
@pytest.mark.slow
async def test_a_started_runner_is_reused_by_the_run(sshd, tmp_path, endpoint):  # noqa: F811
    relay = endpoint(sshd.port)
    app, run = relayed_app(sshd, relay, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.run_over, "the run's end", 240, pilot=pilot)
        await pilot.pause(0.2)
        assert not start_errors(app)
    events = read_events(run.run_dir)
    assert any(isinstance(e, ev.VerdictReady) for e in events)
    assert events[-1].reason != ev.RULE_ERROR
    assert relay.connections == 1  # the early start's connection did the run's work
