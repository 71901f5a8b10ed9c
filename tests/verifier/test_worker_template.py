"""Workers forked from a template (verifier/worker/template.py, host/worker_template.py):
the first worker of a recipe starts the template and is forked from it once it listens
(one spawned ahead of the caller's imports is spawned, the template left to the next);
forked workers are what a spawned worker is (their own session, environment, scratch,
limits, only their own descriptors) with the template as their parent: they verify,
their crashes name their signal, the template answers only its token, forks only from
the files it imported, and is not used when turned off.
Real workers on the CPU (Triton's interpreter) and a real template process, each test
with a socket folder of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from helpers import CHEATS

from kernelladder.engine.protocols import VerifyRequest
from kernelladder.verifier.contract import private_socket
from kernelladder.verifier.contract.scratch import owner_alive
from kernelladder.verifier.host import worker_template
from kernelladder.verifier.host.client import LocalTransport, WorkerClient

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()
# the same kernel, saying where it runs (its stderr is the attempt's log)
SAYS_WHERE = HONEST + (
    "\nimport os as _os, sys as _sys\n"
    "print('WHERE', _os.environ['HOME'], _os.environ['TMPDIR'], _os.getcwd(), file=_sys.stderr)\n"
)
TEMPLATE_START_S = 120.0  # its imports, on a machine running the rest of the suite


def request(source: str = HONEST) -> VerifyRequest:
    return VerifyRequest(op="rmsnorm", source=source, device="cpu")


def stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()  # from the state on: ppid is [1], session [3]


def parent(pid: int) -> int:
    return int(stat_fields(pid)[1])


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def template_socket(folder: str) -> str | None:
    names = [n for n in os.listdir(folder) if n.startswith("template-") and n.endswith(".sock")]
    return os.path.join(folder, names[0]) if names else None


def wait_for_template(folder: str) -> str:
    deadline = time.monotonic() + TEMPLATE_START_S
    while time.monotonic() < deadline:
        path = template_socket(folder) if os.path.isdir(folder) else None
        if path is not None and worker_template.listens(path):
            return path
        time.sleep(0.2)
    raise AssertionError(f"no worker template listens in {folder}")


async def one_verdict(source: str = HONEST):
    """A verdict from a new client's worker, with the worker's pid, hello and the
    exit status its transport read, the client closed after."""
    said: list[str] = []
    client = WorkerClient(lambda: LocalTransport("cpu"), on_stderr=said.append)
    try:
        verdict = await client.verify(request(source), timeout_s=180)
        transport = client._transport
        pid = transport.pid if transport is not None else None
        facts = {"pid": pid, "hello": dict(client._hello or {})}
        if pid is not None and os.path.exists(f"/proc/{pid}"):
            facts["parent"] = parent(pid)
            facts["session"] = int(stat_fields(pid)[3])
            facts["environ"] = environ(pid)
            facts["fds"] = [
                os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
            ]
            facts["limits"] = Path(f"/proc/{pid}/limits").read_text()
            facts["home"] = transport.home
    finally:
        await client.close()
    facts["where"] = next((line.split()[1:] for line in said if line.startswith("WHERE")), None)
    return verdict, facts


def test_a_worker_is_forked_from_its_recipes_template_and_is_a_worker_of_its_own(
    keeper_socket, monkeypatch
):
    monkeypatch.setenv("KL_TEMPLATE_TEST_SECRET", "not-for-workers")
    folder = os.path.dirname(keeper_socket)
    monkeypatch.setenv(worker_template.TEMPLATE_ENV, "0")
    _, spawned = asyncio.run(one_verdict())  # templates off: spawned by this process
    assert spawned["parent"] == os.getpid()
    monkeypatch.delenv(worker_template.TEMPLATE_ENV)

    # the first worker waits for the template it starts, and is forked from it
    verdict, forked = asyncio.run(one_verdict(SAYS_WHERE))
    assert verdict.verdict == "pass", verdict.gates
    path = template_socket(folder)
    template_pid = forked["parent"]
    assert path is not None and template_pid != os.getpid()
    cmdline = Path(f"/proc/{template_pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert "kernelladder.verifier.worker.template" in cmdline and path in cmdline
    # what a spawned worker is: its own session, its scratch as HOME, TMPDIR and cwd, the
    # caller's limits, none of the template's descriptors (socket, connections, lock)
    # (/proc/<pid>/environ still shows the block the template was started with: the
    # kernel keeps a process's first environment there; os.environ is the worker's own)
    assert forked["session"] == forked["pid"]
    assert forked["where"] == [forked["home"]] * 3, forked["where"]
    assert environ(template_pid)["HOME"] != forked["home"]
    assert "KL_TEMPLATE_TEST_SECRET" not in environ(template_pid)  # scrubbed as a worker's
    assert "Max core file size        0" in forked["limits"]
    assert not [fd for fd in forked["fds"] if fd.startswith("socket:") or fd.endswith(".lock")]
    assert forked["hello"]["verifier_files"] == spawned["hello"]["verifier_files"]

    # the next one comes from the same template, its imports made already
    verdict, again = asyncio.run(one_verdict())
    assert verdict.verdict == "pass" and again["parent"] == template_pid
    assert again["pid"] != forked["pid"]
    assert again["hello"]["setup_s"]["imports"] < spawned["hello"]["setup_s"]["imports"]


def test_a_worker_spawned_ahead_starts_the_template_for_the_next(keeper_socket):
    """Spawned ahead (the CLI, before its own imports, no event loop yet), a worker does
    not wait for a template: it is spawned, and the template it starts serves the next."""
    transport = LocalTransport("cpu")
    transport.spawn_ahead()
    try:
        assert parent(transport.pid) == os.getpid()
        wait_for_template(os.path.dirname(keeper_socket))
    finally:
        transport.discard_ahead()


def test_a_forked_workers_crash_names_its_signal_through_the_template(keeper_socket):
    verdict, facts = asyncio.run(one_verdict((CHEATS / "segfault.py").read_text()))
    assert verdict.kind == "crash" and "SIGSEGV" in verdict.gates["crash"].detail
    assert verdict.gates["crash"].evidence.get("exit_code") == -11


def test_the_template_answers_only_its_token_and_forks_only_from_its_files(keeper_socket):
    asyncio.run(one_verdict())
    path = template_socket(os.path.dirname(keeper_socket))
    assert path is not None
    r, w = os.pipe()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # no token
            sock.settimeout(5)
            sock.connect(path)
            private_socket.send_line(sock, {"op": "fork", "version": 1, "argv": []}, [r, w, w])
            answer, _ = private_socket.receive_line(sock, 0)
        assert answer == {"ok": False, "error": "a request without the template's token"}
        # another verifier on disk than the one it imported: refused, and it exits
        stale = worker_template.fork(
            path, ["--device", "cpu"], {}, "/", memory_limit=None, verifier_files="another"
        )
        assert stale is None
    finally:
        os.close(r)
        os.close(w)
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(path)


def test_with_templates_off_every_worker_is_spawned(keeper_socket, monkeypatch):
    monkeypatch.setenv(worker_template.TEMPLATE_ENV, "0")
    for _ in range(2):
        verdict, facts = asyncio.run(one_verdict())
        assert verdict.verdict == "pass" and facts["parent"] == os.getpid()
    folder = os.path.dirname(keeper_socket)
    assert not os.path.isdir(folder) or template_socket(folder) is None


@pytest.mark.parametrize(("device", "setting", "on"), [
    ("cpu", "", True), ("cpu", "0", False), ("cuda", "", False), ("cuda", "1", True),
])  # fmt: skip
def test_templates_are_on_for_cpu_workers_and_asked_for_cuda_ones(device, setting, on):
    assert worker_template.enabled(device, {worker_template.TEMPLATE_ENV: setting}) is on


def test_a_killed_templates_directory_is_swept_and_a_live_ones_is_not(keeper_socket):
    """A template killed with SIGKILL cannot remove its own directory beside the socket:
    the next template's start sweeps it (its marker names the template's process); the
    directory of one that still runs is left alone."""
    _, facts = asyncio.run(one_verdict())
    folder = os.path.dirname(keeper_socket)
    homes = [os.path.join(folder, n) for n in os.listdir(folder) if ".home-" in n]
    assert len(homes) == 1 and facts["parent"] != os.getpid()
    assert worker_template.sweep_homes(folder) == [] and os.path.isdir(homes[0])
    os.kill(facts["parent"], signal.SIGKILL)  # the template the worker was forked from
    deadline = time.monotonic() + 10
    while owner_alive(facts["parent"], None) and time.monotonic() < deadline:
        time.sleep(0.1)  # a zombie (our child, not reaped yet) counts as gone
    assert os.path.isdir(homes[0])  # killed: nothing removed it
    assert worker_template.sweep_homes(folder) == homes and not os.path.exists(homes[0])
