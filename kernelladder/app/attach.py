"""A run another process owns, as the app's bridge sees a run (bridge.SteerableRun).

`kernelladder-tui --attach RUN_DIR` watches and steers a live run without owning it:
events come from tailing RUN_DIR/events.jsonl (every event is there before anyone is
told of it), steering commands go over the run's control channel (engine/run/control.py),
and leaving (detaching) stops nothing. Any number of apps may attach at once. A log may
hold several sessions of one run (stopped, then resumed): the tail goes on past a
session's RunFinished, and a new session (RunReopened) is followed, its commands sent to
its own process. Nothing here imports textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from kernelladder.engine import (
    DETACHED_LOG,
    EVENTS_FILE,
    AttachError,
    ControlClient,
    Owner,
    event_from_dict,
    live_owner,
    writer_active,
)
from kernelladder.engine import events as ev

POLL_S = 0.1  # how often the log is looked at for new lines


class RunGone(Exception):
    """The run's process ended without finishing its log (killed?)."""


class AttachedRun:
    attached = True  # the app offers "Detach" when quitting

    def __init__(
        self, run_dir: str | os.PathLike[str], *, poll_s: float = POLL_S, read_only: bool = False
    ) -> None:
        self.run_dir = Path(run_dir)
        self.read_only = read_only  # watch only: every steering command is refused here
        self.owner: Owner = live_owner(self.run_dir)  # AttachError: not live
        self.client = ControlClient(self.owner.control)
        self.poll_s = poll_s
        self._queue: asyncio.Queue[ev.Event | None] = asyncio.Queue()
        self._stale_clients: list[ControlClient] = []  # earlier sessions' channels
        self.finished_seen = False  # the newest session in the log has finished

    # --- the bridge's side ---------------------------------------------------------
    async def run(self) -> None:
        """Tail the log for as long as the app watches: past the end of a session (a run
        that finished may be resumed into the same log, and is followed), until the
        run's process is gone without finishing its log (RunGone) or the app leaves."""
        path = self.run_dir / EVENTS_FILE
        offset = 0
        partial = b""
        try:
            while True:
                alive = writer_active(self.run_dir)  # asked before reading: no lost tail
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                offset += len(chunk)
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()  # a line still being written
                for line in lines:
                    if not line.strip():
                        continue
                    event = event_from_dict(json.loads(line))
                    self._queue.put_nowait(event)
                    if isinstance(event, ev.RunFinished):
                        self.finished_seen = True
                    elif isinstance(event, ev.RunReopened):
                        self.finished_seen = False  # a new session: its owner steers now
                        self._new_owner()
                if not chunk and not alive and not self.finished_seen:
                    raise RunGone(
                        f"the run's process ended without finishing its log (killed?); "
                        f"continue it with --resume {self.run_dir}"
                    )
                await asyncio.sleep(self.poll_s)
        finally:
            self._queue.put_nowait(None)
            await self.client.close()

    def _new_owner(self) -> None:
        """The process of the newest session, if it serves its channel (it does before
        it logs RunReopened); else the next command asks again (_current_client)."""
        with contextlib.suppress(AttachError):
            owner = live_owner(self.run_dir)
            if owner != self.owner:  # (the socket's path is the run's: the same again)
                self.owner = owner
                self._stale_clients.append(self.client)
                self.client = ControlClient(owner.control)

    async def _current_client(self) -> ControlClient:
        """The channel of the process that owns the run now; ValueError when none does."""
        try:
            owner = live_owner(self.run_dir)
        except AttachError:
            raise ValueError("the run is not running now: there is nothing to steer") from None
        if owner != self.owner:
            self._new_owner()
        for stale in self._stale_clients:
            await stale.close()
        self._stale_clients.clear()
        return self.client

    async def subscribe(self, maxsize: int = 10_000) -> AsyncIterator[ev.Event]:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    # --- RunControl, forwarded to the owner ------------------------------------------
    async def _send(self, command: str, *args: object) -> object:
        if self.read_only:
            raise ValueError("this is a read-only view: steering is off")
        client = await self._current_client()
        return await client.send(command, *args)

    async def prune(self, branch_id: str) -> None:
        await self._send("prune", branch_id)

    async def edit_hints(self, text: str, branch_id: str | None = None) -> None:
        await self._send("edit_hints", text, branch_id)

    async def approve(self, gate_id: str) -> None:
        await self._send("approve", gate_id)

    async def veto(self, gate_id: str, note: str = "") -> None:
        await self._send("veto", gate_id, note)

    async def pause(self, branch_id: str | None = None) -> None:
        await self._send("pause", branch_id)

    async def resume(self, branch_id: str | None = None) -> None:
        await self._send("resume", branch_id)

    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str:
        return await self._send("open_branch", from_attempt, strategy)

    async def set_target(self, target: float | None) -> None:
        await self._send("set_target", target)

    async def stop(self, reason: str = "user") -> None:
        await self._send("stop", reason)


# --- starting a run in the background (--detach) --------------------------------------------


def start_detached(
    optimize_args: Sequence[str], run_dir: Path, *, new_run: bool, wait_s: float = 120.0
) -> subprocess.Popen[bytes]:
    """Start `kernelladder optimize ARGS [--run-dir RUN_DIR] --detached` in a session of
    its own (it outlives this terminal), its output in RUN_DIR/optimize.log, and wait
    until it serves its control channel. AttachError (with the log's last line) if it
    ends first; one that never started leaves nothing behind (the directories made for
    it are removed). AttachError too when RUN_DIR cannot be made (a file on its path,
    /proc)."""
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / DETACHED_LOG
        open(log_path, "ab").close()
    except OSError as exc:
        _remove_made(made, None)
        why = exc.strerror or type(exc).__name__
        raise AttachError(f"cannot create the run directory {run_dir}: {why}") from None
    try:
        return _start(optimize_args, run_dir, log_path, new_run=new_run, wait_s=wait_s)
    except _EndedAtOnce:
        _remove_made(made, log_path)
        raise


class _EndedAtOnce(AttachError):
    """The background run ended before it served its channel: it made nothing to keep."""


def _remove_made(made: list[Path], log_path: Path | None) -> None:
    """Undo a start that failed: its log (said in the error already) and the directories
    made for it, innermost first, each only if nothing else was put there."""
    if log_path is not None and made:
        with contextlib.suppress(OSError):
            log_path.unlink()
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()


def _start(
    optimize_args: Sequence[str], run_dir: Path, log_path: Path, *, new_run: bool, wait_s: float
) -> subprocess.Popen[bytes]:
    where = ["--run-dir", str(run_dir)] if new_run else []
    command = [
        sys.executable, "-m", "kernelladder", "optimize", *optimize_args, *where, "--detached",
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise _EndedAtOnce(
                f"the background run ended at once (exit {process.returncode}): "
                f"{_last_line(log_path)}"
            )
        try:
            live_owner(run_dir)
            return process
        except AttachError:
            time.sleep(0.05)
    raise AttachError(
        f"the background run (pid {process.pid}) did not open its control channel in "
        f"{wait_s:g}s; see {log_path}"
    )


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no output)"
    return lines[-1] if lines else "(no output)"
