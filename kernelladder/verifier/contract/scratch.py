"""Worker scratch directories: made with an owner marker, swept when their owners are gone.

A worker's scratch directory (`kl-worker-*` in the temp dir; candidate files, the
worker's HOME and TMPDIR) is removed by whoever made it when the worker ends cleanly.
A SIGKILLed worker or caller leaves it behind, so each new worker first sweeps the
temp dir: a directory goes when every process its marker names is gone.

The marker (`.kl-owner` inside the directory) names the owning processes by pid and
start time (Linux: /proc/<pid>/stat field 22), so a recycled pid is not taken for the
owner, and the pid namespace and boot they live in, so a temp dir shared with another
container or an earlier boot is never judged by pids that mean something else there.
A directory with no readable marker (one being made this instant, or one made by an
older version) is left alone unless untouched for UNMARKED_MAX_AGE_S.

Standard library only (the verifier runs alone on a GPU box with torch and triton).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable

SCRATCH_PREFIX = "kl-worker-"
MARKER_NAME = ".kl-owner"
MARKER_MAGIC = "kl-worker-owner 1"
UNMARKED_MAX_AGE_S = 24 * 3600.0  # generous: an older version's live worker keeps its dir
SWEEP_BUDGET_S = 10.0  # a worker start never waits long on removals; the rest go next time
_MARKER_MAX_BYTES = 4096


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None if unknown."""
    fields = _proc_stat(pid)
    return fields[1] if fields is not None else None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) from /proc/<pid>/stat, None where it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read().decode("ascii", errors="replace")
        # the command name (field 2) may hold spaces and parentheses: split after its end
        rest = text[text.rindex(")") + 2 :].split()
        return rest[0], int(rest[19])  # fields 3 (state) and 22 (starttime)
    except (OSError, ValueError, IndexError):
        return None


def host_identity() -> str:
    """Where pids mean something: this boot and this pid namespace ("" if unknown)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = os.readlink("/proc/self/ns/pid")
    return f"{boot}/{namespace}" if boot or namespace else ""


def _owner_line(pid: int) -> str:
    start = process_start_time(pid)
    return f"pid {int(pid)} {'-' if start is None else start}\n"


def _write_atomically(path: str, text: str) -> None:
    # a sweeper reading at the same moment sees the old marker or the new one, never half
    partial = os.path.join(path, f"{MARKER_NAME}.{os.getpid()}.tmp")
    with open(partial, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(partial, os.path.join(path, MARKER_NAME))


def write_marker(path: str, pids: Iterable[int]) -> None:
    """Name the processes that own the scratch directory at `path`."""
    lines = [MARKER_MAGIC + "\n", f"host {host_identity()}\n"]
    lines += [_owner_line(pid) for pid in pids]
    _write_atomically(path, "".join(lines))


def add_owner(path: str, pid: int) -> None:
    """One more owner (a worker spawned into the directory); best effort."""
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(path, MARKER_NAME), encoding="ascii") as f:
            text = f.read(_MARKER_MAX_BYTES)
        if text.startswith(MARKER_MAGIC) and text.endswith("\n"):
            _write_atomically(path, text + _owner_line(pid))


def make_scratch(
    parent: str | None = None, *, owners: Iterable[int] | None = None, sweep: bool = True
) -> str:
    """Sweep stale scratch directories out of `parent` (default: the temp dir) unless
    told not to, then make a fresh one there with its marker; `owners` defaults to this
    process."""
    parent = parent or tempfile.gettempdir()
    if sweep:
        sweep_stale(parent)
    path = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)
    with contextlib.suppress(OSError):  # without a marker it is only swept when a day old
        write_marker(path, [os.getpid()] if owners is None else owners)
    return path


def _read_marker(path: str) -> tuple[str, list[tuple[int, int | None]]] | None:
    """(host identity, owners) from a directory's marker; None if absent or unreadable."""
    try:
        fd = os.open(os.path.join(path, MARKER_NAME), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            text = f.read(_MARKER_MAX_BYTES).decode("ascii")
    except (OSError, ValueError):
        return None
    lines = text.splitlines()
    if len(lines) < 3 or lines[0] != MARKER_MAGIC or not lines[1].startswith("host "):
        return None
    owners: list[tuple[int, int | None]] = []
    for line in lines[2:]:
        words = line.split()
        if len(words) != 3 or words[0] != "pid" or not words[1].isdigit():
            return None
        if words[2] != "-" and not words[2].isdigit():
            return None
        pid = int(words[1])
        if pid <= 0:
            return None
        owners.append((pid, None if words[2] == "-" else int(words[2])))
    return lines[1][len("host ") :], owners


def owner_alive(pid: int, start_time: int | None) -> bool:
    """Whether that process (not merely that pid) still runs; unsure means alive."""
    fields = _proc_stat(pid)
    if fields is not None:
        state, start = fields
        if state in ("Z", "X"):  # dead, only not yet reaped
            return False
        return start_time is None or start == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process (or no permission): leave it be
        return True
    return True


def is_stale(path: str, *, now: float | None = None, here: str | None = None) -> bool:
    """Whether the scratch directory at `path` (already known to be a real directory of
    ours) belongs to nobody any more. Reads only the marker and the directory's stat."""
    marker = _read_marker(path)
    here = host_identity() if here is None else here
    if marker is not None and marker[0] == here:
        return not any(owner_alive(pid, start) for pid, start in marker[1])
    # no marker, or pids from another namespace or boot: only age can tell
    try:
        modified = os.lstat(path).st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - modified > UNMARKED_MAX_AGE_S


def sweep_stale(
    parent: str | None = None,
    *,
    budget_s: float = SWEEP_BUDGET_S,
    named: Callable[[str], bool] | None = None,
) -> list[str]:
    """Remove the stale `kl-worker-*` directories in `parent` (default: the temp dir) that
    belong to this user and are not symlinks (`named`: which names to look at instead, a
    worker template's directories); returns the paths removed. Never raises."""
    removed: list[str] = []
    try:
        parent = parent or tempfile.gettempdir()
        deadline = time.monotonic() + budget_s
        here, now, uid = host_identity(), time.time(), os.getuid()
        with os.scandir(parent) as entries:
            candidates = [
                e.path
                for e in entries
                if (named(e.name) if named is not None else e.name.startswith(SCRATCH_PREFIX))
            ]
        for path in candidates:
            if time.monotonic() > deadline:
                break
            with contextlib.suppress(Exception):
                info = os.lstat(path)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                    continue  # a symlink, a file, or someone else's: never ours to remove
                if is_stale(path, now=now, here=here):
                    shutil.rmtree(path, ignore_errors=True)
                    if not os.path.lexists(path):
                        removed.append(path)
    except Exception:
        pass  # a sweep must never stop a worker from starting
    return removed
