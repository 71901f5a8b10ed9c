"""A real OpenSSH server on 127.0.0.1 for the SSH runner's tests.

The server runs /usr/sbin/sshd in the foreground with its own config, host key,
authorized key and a free port; tests log in as the current user (root on CI, whose
shell start-up costs ~150 ms a command — the runner pays it once per worker, not per
attempt). Keys are throwaway (asyncssh.generate_private_key). `bin/docker` on the
server's PATH is a test double for the docker CLI, because no docker engine runs on
these machines: it logs its argv and runs the command it was asked to exec.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from kernelladder.engine.runners.ssh.config import HostConfig, SSHTarget

SSHD = "/usr/sbin/sshd"
FAKE_CONTAINER = "kl-test"

_DOCKER_DOUBLE = """#!{python}
# Test double for the docker CLI (no docker engine runs on the test machines): logs its
# argv as one JSON line, then runs what `docker exec [-i] CONTAINER CMD...` would run.
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "docker.log"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if not args or args[0] != "exec":
    sys.exit("docker double: only `exec` is supported")
args = args[1:]
while args and args[0].startswith("-"):
    args = args[1:]
if not args or args[0] != {container!r}:
    sys.stderr.write("Error response from daemon: No such container: %s\\n" % (args[:1] or [""])[0])
    sys.exit(1)
os.execvp(args[1], args[1:])
"""


def sshd_available() -> str | None:
    """None when sshd can run here, else why not. Installs openssh-server as root when it
    is missing (CI's ./dev/test does the same)."""
    if not Path(SSHD).exists() and os.geteuid() == 0 and shutil.which("apt-get"):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                "apt-get update -qq && apt-get install -y -qq openssh-server",
                shell=True,
                check=False,
                timeout=180,
                capture_output=True,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
    if not Path(SSHD).exists():
        return f"{SSHD} is missing (apt-get install openssh-server); the SSH tests need a real sshd"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SSHServer:
    base: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    host_key: asyncssh.SSHKey | None = None
    user: str = field(default_factory=getpass.getuser)

    @property
    def host_key_path(self) -> Path:
        return self.base / "ssh_host_ed25519_key"

    @property
    def client_key_path(self) -> Path:
        return self.base / "client_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.base / "known_hosts"

    @property
    def bin_dir(self) -> Path:
        return self.base / "bin"

    @property
    def docker_log(self) -> Path:
        return self.base / "docker.log"

    @property
    def log_path(self) -> Path:
        return self.base / "sshd.log"

    def prepare(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key.write_private_key(str(self.host_key_path))
        self.host_key_path.chmod(0o600)
        client = asyncssh.generate_private_key("ssh-ed25519")
        client.write_private_key(str(self.client_key_path))
        self.client_key_path.chmod(0o600)
        client.write_public_key(str(self.base / "authorized_keys"))
        self.port = _free_port()
        self.write_known_hosts(self.host_key)
        self.bin_dir.mkdir(exist_ok=True)
        docker = self.bin_dir / "docker"
        docker.write_text(_DOCKER_DOUBLE.format(python=sys.executable, container=FAKE_CONTAINER))
        docker.chmod(0o755)
        path = f"{self.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        (self.base / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key_path}",
                    f"AuthorizedKeysFile {self.base / 'authorized_keys'}",
                    f"PidFile {self.base / 'sshd.pid'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    f"SetEnv PATH={path}",
                    "MaxSessions 50",
                    "MaxStartups 50",
                    "",
                ]
            )
        )

    def write_known_hosts(self, key: asyncssh.SSHKey | None, path: Path | None = None) -> Path:
        path = path or self.known_hosts_path
        line = f"[127.0.0.1]:{self.port} {key.export_public_key().decode()}" if key else ""
        path.write_text(line)
        return path

    def start(self) -> None:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation dir
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.base / "sshd_config")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log_path.read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s,
            ):
                if s.recv(4).startswith(b"SSH-"):
                    return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        """Stop the listener and every session it serves."""
        self.drop_connections()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener)."""
        if self.proc is None:
            return []
        return [pid for pid, ppid in _process_parents().items() if ppid == self.proc.pid]

    def drop_connections(self) -> int:
        """Kill every connection's sshd process: the clients see the link drop."""
        pids = self.session_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def docker_calls(self) -> list[list[str]]:
        if not self.docker_log.exists():
            return []
        return [json.loads(line) for line in self.docker_log.read_text().splitlines() if line]

    def host_config(self, **changes) -> HostConfig:
        values = dict(
            target=SSHTarget(host="127.0.0.1", user=self.user, port=self.port),
            name="loopback",
            key=self.client_key_path,
            known_hosts=self.known_hosts_path,
            python=sys.executable,  # the "remote" interpreter is this machine's
            remote_dir=str(self.base / "remote"),
            gpus=(0,),
            connect_timeout_s=10.0,
            command_timeout_s=30.0,
            worker_start_timeout_s=120.0,
        )
        values.update(changes)
        return HostConfig(**values)


def _process_parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (pid 1 here may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SSHServer:
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    server = SSHServer(base=tmp_path_factory.mktemp("sshd"))
    server.prepare()
    server.start()
    yield server
    server.stop()
