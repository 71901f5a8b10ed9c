"""One SSH connection to a GPU box: connect with verified host keys and key auth only,
resolve remote paths, sync the verifier, run short commands, and build the (quoted)
command that starts a worker there.

Nothing from configuration or from a candidate reaches a shell unquoted: every value
in a remote command passes through shlex.quote, and the candidate travels on stdin only.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from kernelladder.engine.runners.ssh.config import HostConfig
from kernelladder.engine.runners.ssh.sync import SyncResult, remote_state, sync_tree
from kernelladder.verifier.contract.protocol import WORKER_MODULE

KEEPALIVE_INTERVAL_S = 10.0  # a silent peer is declared lost after interval * count
KEEPALIVE_COUNT_MAX = 3

# Runs on the box with the login environment, before anything of the candidate's:
# a new session (so pid == pgid and the whole group can be killed), the same scrubbed
# environment as a local worker (verifier/contract/env.py, synced with the tree), then the
# worker itself. Its scratch dir names this pid as owner (the worker keeps the pid and
# start time across execve), first sweeping the dirs of workers killed on the box, and
# the worker removes it as it exits. Values arrive as argv, never as code.
WORKER_BOOTSTRAP = """\
import os, sys, tempfile
tree, gpu, device = sys.argv[1:4]
sandbox = sys.argv[4] if len(sys.argv) > 4 else "auto"
sys.path.insert(0, tree)
from kernelladder.verifier.contract.env import worker_env
from kernelladder.verifier.contract.scratch import make_scratch
try:
    os.setsid()
except OSError:
    pass
sys.stdout.write('{"type": "kl-pgid", "pgid": %d}\\n' % os.getpgid(0))
sys.stdout.flush()
extra = {"PYTHONPATH": tree, "CUDA_VISIBLE_DEVICES": gpu}
if device == "cpu":
    extra["TRITON_INTERPRET"] = "1"
home = make_scratch(tempfile.gettempdir())
env = worker_env(home, os.environ, extra)
argv = [sys.executable, "-m", "@MODULE@", "--device", device, "--scratch", home]
argv += ["--remove-scratch", "--sandbox", sandbox]
os.execve(sys.executable, argv, env)
""".replace("@MODULE@", WORKER_MODULE)

# SIGKILL a worker's process group. "stale" (after a reconnect): only if that group's
# leader is still one of our workers, so a recycled pid is never hit.
KILL_GROUP = """\
import os, signal, sys
pgid, mode = int(sys.argv[1]), sys.argv[2]
if mode == "stale":
    try:
        with open("/proc/%d/cmdline" % pgid, "rb") as f:
            if b"kernelladder.verifier.worker" not in f.read():
                sys.exit(0)
    except OSError:
        sys.exit(0)
try:
    os.killpg(pgid, signal.SIGKILL)
except OSError:
    pass
"""


class RemoteError(Exception):
    """A remote failure a person can act on; the message is one line."""


class HostKeyError(RemoteError):
    """The box's host key is not in known_hosts (unknown) or differs from it (changed)."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        port: int,
        fingerprint: str | None,
        changed: bool,
        key: asyncssh.SSHKey | None = None,
        known_hosts: Path | None = None,
    ):
        super().__init__(message)
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
        self.changed = changed
        self.key = key
        self.known_hosts = known_hosts


# --- connecting -----------------------------------------------------------------------


def load_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """The trusted keys; a missing file trusts nothing (never 'trust everything')."""
    if not path.exists():
        return asyncssh.import_known_hosts("")
    try:
        return asyncssh.read_known_hosts(str(path))
    except (OSError, ValueError) as exc:
        raise RemoteError(f"cannot read known_hosts {path}: {exc}") from None


def known_hosts_pattern(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def trust_host_key(known_hosts: Path, host: str, port: int, key: asyncssh.SSHKey) -> None:
    """Append the key to known_hosts (for an UNKNOWN key a person has looked at)."""
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    line = f"{known_hosts_pattern(host, port)} {key.export_public_key().decode().strip()}\n"
    with known_hosts.open("a", encoding="utf-8") as f:
        f.write(line)


async def fetch_host_key(host: HostConfig) -> asyncssh.SSHKey | None:
    """The key the box presents (no authentication happens)."""
    with contextlib.suppress(OSError, asyncssh.Error, TimeoutError):
        async with asyncio.timeout(host.connect_timeout_s):
            return await asyncssh.get_server_host_key(
                host.target.host, host.target.port, config=None
            )
    return None


async def diagnose_host_key(host: HostConfig) -> HostKeyError:
    """Tell an unknown key from a changed one, with the presented key's fingerprint."""
    t = host.target
    key = await fetch_host_key(host)
    fingerprint = key.get_fingerprint("sha256") if key else None
    trusted = load_known_hosts(host.known_hosts)
    host_keys, ca_keys, *_ = trusted.match(t.host, t.host, t.port)
    name = known_hosts_pattern(t.host, t.port)
    changed = bool(host_keys or ca_keys)
    if changed:
        message = (
            f"HOST KEY CHANGED for {name}: the box presents {fingerprint or 'another key'}, "
            f"which is not the key recorded in {host.known_hosts}; refusing to connect "
            "(if the box was really reinstalled, remove its old line there yourself)"
        )
    else:
        message = (
            f"unknown host key for {name} ({fingerprint or 'fingerprint unavailable'}): "
            f"add it to {host.known_hosts} with `ssh-keyscan -p {t.port} {t.host}` after "
            "checking the fingerprint, or run `kernelladder doctor --remote --trust`"
        )
    return HostKeyError(
        message,
        host=t.host,
        port=t.port,
        fingerprint=fingerprint,
        changed=changed,
        key=key,
        known_hosts=host.known_hosts,
    )


class _LinkClient(asyncssh.SSHClient):
    def __init__(self, lost: asyncio.Event):
        self._lost = lost

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()


async def open_connection(
    host: HostConfig, lost: asyncio.Event | None = None
) -> asyncssh.SSHClientConnection:
    """A verified, key-authenticated connection; RemoteError (one line) otherwise."""
    t = host.target
    lost = lost or asyncio.Event()
    known = load_known_hosts(host.known_hosts)
    client_keys: Any = [str(host.key)] if host.key else ()  # (): the default ~/.ssh keys
    try:
        conn, _ = await asyncio.wait_for(
            asyncssh.create_connection(
                lambda: _LinkClient(lost),
                t.host,
                t.port,
                username=t.user,
                known_hosts=known,
                client_keys=client_keys,
                agent_path=None,  # key files only: no agent, so nothing to forward
                agent_forwarding=False,
                password=None,
                password_auth=False,
                kbdint_auth=False,
                gss_auth=False,
                preferred_auth="publickey",
                config=None,  # ~/.ssh/config could silently relax what is set here
                connect_timeout=host.connect_timeout_s,
                login_timeout=host.connect_timeout_s,
                keepalive_interval=KEEPALIVE_INTERVAL_S,
                keepalive_count_max=KEEPALIVE_COUNT_MAX,
            ),
            timeout=host.connect_timeout_s + 5,
        )
    except asyncssh.HostKeyNotVerifiable:
        raise await diagnose_host_key(host) from None
    except asyncssh.PermissionDenied:
        key = host.key or "the default keys in ~/.ssh"
        raise RemoteError(
            f"key authentication failed for {t}: is the public half of {key} in the box's "
            "~/.ssh/authorized_keys?"
        ) from None
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise RemoteError(f"cannot use the key {host.key}: {exc}") from None
    except TimeoutError:
        raise RemoteError(
            f"connecting to {t} timed out after {host.connect_timeout_s:g} s"
        ) from None
    except OSError as exc:
        raise RemoteError(f"cannot reach {t}: {exc.strerror or exc}") from None
    except asyncssh.Error as exc:
        raise RemoteError(f"ssh to {t} failed: {exc.reason}") from None
    return conn


# --- one link --------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerCommand:
    """The remote command line of one worker and what it was built from."""

    command: str  # what the login shell on the box runs
    tree_path: str
    gpu: str
    device: str


def expand_home(path: str, home: str) -> str:
    if path == "~":
        return home
    if path.startswith("~/"):
        return posixpath.join(home, path[2:])
    return path


def python_command(
    host: HostConfig, *, python: str, code: str, args: tuple[str, ...] = (), cwd: str | None = None
) -> str:
    """`[cd CWD &&] exec PYTHON -c CODE ARGS...` for the box's login shell, wrapped in
    `docker exec -i CONTAINER sh -c '...'` when a container is set; every word quoted."""
    words = ["exec", shlex.quote(python), "-c", shlex.quote(code), *map(shlex.quote, args)]
    if cwd is not None:
        words = ["cd", shlex.quote(cwd), "&&", *words]
    inner = " ".join(words)
    if host.container is None:
        return inner
    return " ".join(
        [
            "exec",
            "docker",
            "exec",
            "-i",
            shlex.quote(host.container),
            "sh",
            "-c",
            shlex.quote(inner),
        ]
    )


def worker_command(
    host: HostConfig, *, python: str, tree_path: str, gpu: str, device: str, sandbox: str = "auto"
) -> str:
    """The command that starts one worker from a synced tree (see WORKER_BOOTSTRAP);
    `sandbox` is the worker's --sandbox mode (the walls go up on the box)."""
    return python_command(
        host,
        python=python,
        code=WORKER_BOOTSTRAP,
        args=(tree_path, gpu, device, sandbox),
        cwd=tree_path,
    )


def kill_command(host: HostConfig, *, python: str, pgid: int, stale: bool = False) -> str:
    mode = "stale" if stale else "now"
    return python_command(host, python=python, code=KILL_GROUP, args=(str(int(pgid)), mode))


class HostLink:
    """A connection to one host and what was resolved over it (home, remote dir, tree).

    `lost` is set when the connection drops; call connect() again to reconnect."""

    def __init__(self, host: HostConfig, *, root: Path | None = None):
        self.host = host
        self.root = root  # the local package to sync (default: this installation)
        self.conn: asyncssh.SSHClientConnection | None = None
        self.lost = asyncio.Event()
        self.home: str | None = None
        self.remote_dir: str | None = None
        self.python: str | None = None
        self.last_sync: SyncResult | None = None
        self.stale_groups: set[int] = set()  # workers left running when the link dropped

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.lost.is_set()

    async def connect(self) -> None:
        await self.close()
        self.lost = asyncio.Event()
        self.conn = await open_connection(self.host, self.lost)
        try:
            async with asyncio.timeout(self.host.command_timeout_s):
                async with self.conn.start_sftp_client() as sftp:
                    self.home = await sftp.realpath(".")
        except (TimeoutError, asyncssh.Error, OSError) as exc:
            await self.close()
            raise RemoteError(f"{self.host.target}: cannot open SFTP: {_why(exc)}") from None
        self.remote_dir = expand_home(self.host.remote_dir, self.home)
        self.python = expand_home(self.host.python, self.home)

    def _require(self) -> asyncssh.SSHClientConnection:
        if self.conn is None or self.lost.is_set():
            raise RemoteError(f"{self.host.target}: not connected")
        return self.conn

    async def sync(self) -> SyncResult:
        conn = self._require()
        assert self.remote_dir is not None
        timeout = self.host.command_timeout_s * 3
        try:
            async with conn.start_sftp_client() as sftp:
                self.last_sync = await sync_tree(
                    sftp, self.remote_dir, root=self.root, timeout_s=timeout
                )
        except TimeoutError:
            raise RemoteError(
                f"{self.host.target}: syncing to {self.remote_dir} timed out after {timeout:g} s"
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(
                f"{self.host.target}: cannot sync to {self.remote_dir}: {_why(exc)}"
            ) from None
        return self.last_sync

    async def sync_state(self) -> dict[str, Any]:
        conn = self._require()
        assert self.remote_dir is not None
        async with asyncio.timeout(self.host.command_timeout_s):
            async with conn.start_sftp_client() as sftp:
                return await remote_state(sftp, self.remote_dir, root=self.root)

    async def run(
        self, command: str, *, timeout_s: float | None = None
    ) -> asyncssh.SSHCompletedProcess:
        """A short command on the box (its login shell runs it), bounded in time."""
        conn = self._require()
        timeout = timeout_s or self.host.command_timeout_s
        try:
            return await asyncio.wait_for(conn.run(command, check=False), timeout)
        except TimeoutError:
            raise RemoteError(
                f"{self.host.target}: a command timed out after {timeout:g} s"
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(f"{self.host.target}: {_why(exc)}") from None

    async def round_trip_s(self) -> float:
        """Time of one SSH-level round trip (a global request; no shell is started)."""
        conn = self._require()
        samples = []
        async with asyncio.timeout(self.host.command_timeout_s):
            async with conn.start_sftp_client() as sftp:
                for _ in range(5):  # one SFTP stat is one round trip; the least is the link's
                    started = time.perf_counter()
                    await sftp.stat(".")
                    samples.append(time.perf_counter() - started)
        return min(samples)

    def worker_command(self, *, gpu: str, device: str, sandbox: str = "auto") -> WorkerCommand:
        if self.last_sync is None or self.python is None:
            raise RemoteError(f"{self.host.target}: sync before starting a worker")
        command = worker_command(
            self.host,
            python=self.python,
            tree_path=self.last_sync.tree_path,
            gpu=gpu,
            device=device,
            sandbox=sandbox,
        )
        return WorkerCommand(command, self.last_sync.tree_path, gpu, device)

    async def kill_group(self, pgid: int, *, stale: bool = False) -> None:
        """SIGKILL a worker's whole process group on the box (best effort, bounded)."""
        if self.conn is None or self.lost.is_set() or self.python is None:
            self.stale_groups.add(pgid)
            return
        with contextlib.suppress(RemoteError):
            await self.run(kill_command(self.host, python=self.python, pgid=pgid, stale=stale))

    async def kill_stale_groups(self) -> None:
        """After a reconnect: kill the workers the dropped link left behind (a hung
        candidate would otherwise keep its GPU busy)."""
        groups, self.stale_groups = self.stale_groups, set()
        for pgid in sorted(groups):
            await self.kill_group(pgid, stale=True)

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.Error):
        return exc.reason
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__
