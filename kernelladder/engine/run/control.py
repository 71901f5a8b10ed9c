"""The control channel of a live run: how apps attach to a run another process owns.

The process that runs the engine (e.g. a headless `kernelladder optimize`) serves a Unix
socket and writes RUN_DIR/owner.json (its pid, host and the socket's path) while the run
is live (the socket itself lives in the runtime directory: see socket_path); the log's writer lock (log.writer_active) says whether it still is. An attached
app tails events.jsonl for what happens and sends steering commands over the socket, one
JSON line each: {"command": "pause", "args": []} -> {"ok": true, "result": ...} or
{"ok": false, "error": "one line"}. The engine applies each command it receives once,
through the same RunControl methods the in-process app calls, so every command is an
event in the log and two attached apps see the same events. Nothing here imports textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import RunControl
from kernelladder.engine.record.log import EVENTS_FILE, write_durable, writer_active

OWNER_FILE = "owner.json"
DETACHED_LOG = "optimize.log"  # a run started in the background writes its output here
OWNER_SCHEMA_VERSION = 1
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux (104 on macOS)
MAX_REQUEST_BYTES = 1 << 20

# The RunControl commands an app may send (the in-process bridge uses the same list):
# the protocol's async methods, so a new command is declared once, in protocols.py.
STEERING_COMMANDS = frozenset(
    name
    for name, member in vars(RunControl).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(member)
)


# What a process beside the run may record through the channel: facts about the run's
# kernels that change nothing of its course (Run.record_deploy). Not steering: a watcher's
# keys never send them.
RECORD_COMMANDS = frozenset({"record_deploy"})
SERVED_COMMANDS = STEERING_COMMANDS | RECORD_COMMANDS


class AttachError(Exception):
    """A run cannot be attached to; the message is one line for a person."""


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    control: str  # the socket's path
    since: float


def socket_path(run_dir: str | os.PathLike[str]) -> Path:
    """The run's socket: in the user's runtime directory (else the temporary one), named
    by a hash of the run directory. Not in the run directory itself: a socket there would
    break a copy of a live run (cp -r, shutil.copytree) and may be too long a path."""
    here = os.fsencode(Path(run_dir).resolve())
    digest = hashlib.sha256(here).hexdigest()[:20]
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"kernelladder-{os.getuid()}-{digest}.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        path = Path(tempfile.gettempdir()) / path.name
    return path


def read_owner(run_dir: str | os.PathLike[str]) -> Owner | None:
    try:
        data = json.loads((Path(run_dir) / OWNER_FILE).read_text(encoding="utf-8"))
        return Owner(
            int(data["pid"]), str(data["host"]), str(data["control"]), float(data["since"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_owner(run_dir: str | os.PathLike[str]) -> Owner:
    """The owner of a live run, or AttachError saying why the run cannot be attached."""
    path = Path(run_dir)
    if not (path / EVENTS_FILE).is_file():
        raise AttachError(f"{run_dir} holds no run (no {EVENTS_FILE})")
    owner = read_owner(path)
    if not writer_active(path):
        raise AttachError(
            f"the run in {run_dir} is not running (no process owns its log); "
            f"watch it with --replay {run_dir} or continue it with --resume {run_dir}"
        )
    if owner is None or not Path(owner.control).exists():
        raise AttachError(
            f"the run in {run_dir} is running but offers no control channel "
            f"(started by an older kernelladder?)"
        )
    return owner


# --- the engine side --------------------------------------------------------------------


class ControlServer:
    """Serves steering commands to `control` (a RunControl) on the engine's loop."""

    def __init__(self, control: Any, run_dir: str | os.PathLike[str]) -> None:
        self.control = control
        self.run_dir = Path(run_dir)
        self.path = socket_path(self.run_dir)
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self.commands_applied = 0

    async def start(self) -> None:
        """Listen and write owner.json; OSError when the socket cannot be made."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a killed session (the log lock says it is gone)
        old = os.umask(0o177)  # the socket is the owner's only: commands steer the run
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), limit=MAX_REQUEST_BYTES
            )
        finally:
            os.umask(old)
        owner = {
            "schema_version": OWNER_SCHEMA_VERSION,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "control": str(self.path),
            "since": time.time(),
        }
        write_durable(self.run_dir / OWNER_FILE, json.dumps(owner, indent=1).encode("utf-8"))

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._clients):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2.0)
        for path in (self.path, self.run_dir / OWNER_FILE):
            with contextlib.suppress(OSError):
                path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):  # a line over the limit, a reset
                    return
                if not line:
                    return
                reply = await self._apply(line)
                writer.write(json.dumps(reply, default=str).encode("utf-8") + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._clients.discard(writer)
            writer.close()

    async def _apply(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            command = request["command"]
            args = request.get("args") or []
            if not isinstance(args, list):
                raise TypeError("args must be a list")
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        if command not in SERVED_COMMANDS:
            return {"ok": False, "error": f"unknown command {command!r}"}
        try:
            result = await getattr(self.control, command)(*args)
        except (ValueError, TypeError) as exc:
            return {"ok": False, "error": " ".join(str(exc).split()) or type(exc).__name__}
        self.commands_applied += 1
        return {"ok": True, "result": result}


# --- the app side -----------------------------------------------------------------------


class ControlClient:
    """Sends commands to a live run's ControlServer, one at a time, over one connection.
    A refused command raises ValueError with the engine's line; a lost channel raises
    ValueError too (the command may or may not have been applied: it is never resent)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock: asyncio.Lock | None = None

    async def send(self, command: str, *args: Any) -> Any:
        if command not in SERVED_COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            try:
                if self._writer is None:
                    self._reader, self._writer = await asyncio.open_unix_connection(
                        self.path, limit=MAX_REQUEST_BYTES
                    )
                assert self._reader is not None
                request = {"command": command, "args": list(args)}
                self._writer.write(json.dumps(request).encode("utf-8") + b"\n")
                await self._writer.drain()
                line = await self._reader.readline()
            except OSError:
                line = b""
            if not line:
                await self.close()
                raise ValueError("the run's control channel is closed (the run has ended?)")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ValueError(str(reply.get("error") or "refused"))
        return reply.get("result")

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
