"""The run's event log: RUN_DIR/events.jsonl plus attempts/<n>.py|json and meta.json.

Every write is flushed and fsync'd before the call returns, so whatever the engine has
published survives a `kill -9`. A torn last line (the process died mid-write) is
tolerated by the reader and truncated by `repair_tail` when the run is resumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelladder.engine.record.events import Event, event_from_dict
from kernelladder.engine.record.upcast import upcast

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

EVENTS_FILE = "events.jsonl"
META_FILE = "meta.json"
ATTEMPTS_DIR = "attempts"
META_SCHEMA_VERSION = 1


class LogError(Exception):
    """The run directory cannot be read as a run (one line for a person)."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fsync_dir(path: Path) -> None:
    # a new file's directory entry must reach the disk too, or a crash can lose the file
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write a whole file atomically (temp + rename) and fsync it and its directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


LOCK_TRIES = 10
LOCK_RETRY_S = 0.02


def _lock_for_writing(f: Any, run_dir: str | os.PathLike[str]) -> None:
    """One writer per run: an exclusive lock on the open log, held until it is closed
    (the kernel drops it when the process dies, so a killed run can be resumed)."""
    if fcntl is None:  # not POSIX: keeping one writer is left to the user
        return
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            # a reader asking writer_active holds a shared lock for an instant; a live
            # writer holds its lock for the whole run
            if attempt + 1 < LOCK_TRIES:
                time.sleep(LOCK_RETRY_S)
        except OSError:  # a filesystem without locks: go on unlocked, as before
            return
    raise LogError(
        f"{run_dir}: another process is writing this run (still running?); stop it before resuming"
    )


def writer_active(run_dir: str | os.PathLike[str]) -> bool:
    """True while a process holds the run's log for writing (the run is live)."""
    if fcntl is None:
        return False
    try:
        with open(Path(run_dir) / EVENTS_FILE, "rb") as f:
            try:  # a shared lock, let go at once: it only asks whether a writer holds one
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    except OSError:
        pass
    return False


@dataclass(frozen=True)
class LogRead:
    events: list[Event]
    torn: bool  # the file ended in a partial (or unparsable) last line
    valid_bytes: int  # length of the intact prefix
    offsets: list[int]  # byte offset of each event's line, by seq


def read_log(run_dir: str | os.PathLike[str]) -> LogRead:
    """Every intact event of a run. A partial or garbled LAST line is reported as torn;
    a garbled line anywhere else is an error (the log was edited or corrupted)."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise LogError(f"{run_dir}: no {EVENTS_FILE} (not a run directory)") from None
    except OSError as exc:
        raise LogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    events: list[Event] = []
    offsets: list[int] = []
    pos = 0
    torn = False
    while pos < len(data):
        end = data.find(b"\n", pos)
        last = end < 0
        line = data[pos:] if last else data[pos:end]
        try:
            event = event_from_dict(upcast(_json_object(line), run_dir))
        except (ValueError, TypeError) as exc:
            if last or data[end + 1 :].strip() == b"":
                torn = True
                break
            line_no = data.count(b"\n", 0, pos) + 1
            raise LogError(f"{path}: corrupt line {line_no} (byte {pos}): {exc}") from None
        if last:
            # a complete JSON object without its newline: the write was cut short
            torn = True
            break
        offsets.append(pos)
        events.append(event)
        pos = end + 1
    return LogRead(events=events, torn=torn, valid_bytes=pos, offsets=offsets)


def read_events(run_dir: str | os.PathLike[str]) -> list[Event]:
    """The run's events in order; a torn last line is left out (see `read_log`)."""
    return read_log(run_dir).events


def repair_tail(run_dir: str | os.PathLike[str]) -> bool:
    """Truncate a torn last line; True when something was cut."""
    read = read_log(run_dir)
    if not read.torn:
        return False
    path = Path(run_dir) / EVENTS_FILE
    with open(path, "r+b") as f:
        _lock_for_writing(f, run_dir)  # a torn tail may be a live run's line half written
        f.truncate(read.valid_bytes)
        f.flush()
        os.fsync(f.fileno())
    return True


def _json_object(text: str | bytes) -> dict[str, Any]:
    """One JSON object; ValueError for anything else (a list or a number is not an event)."""
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def read_meta(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(run_dir) / META_FILE
    try:
        return _json_object(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise LogError(f"{run_dir}: no {META_FILE} (not a run directory)") from None
    except ValueError as exc:
        raise LogError(f"{path}: unreadable: {exc}") from None
    except OSError as exc:
        raise LogError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_attempt_source(run_dir: str | os.PathLike[str], attempt: int) -> str:
    return (Path(run_dir) / ATTEMPTS_DIR / f"{attempt}.py").read_text()


def read_attempt_verdict(run_dir: str | os.PathLike[str], attempt: int) -> dict[str, Any]:
    return json.loads((Path(run_dir) / ATTEMPTS_DIR / f"{attempt}.json").read_text())


class EventLog:
    """Appends events to RUN_DIR/events.jsonl, assigning seq (0-based, gap-free) and ts.

    Opening an existing log continues its numbering; call `repair_tail` first if the
    last line may be torn (resume does).
    """

    def __init__(
        self, run_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / ATTEMPTS_DIR).mkdir(exist_ok=True)
        self.path = self.run_dir / EVENTS_FILE
        self._clock = clock
        existed = self.path.exists()
        self._file = open(self.path, "ab")  # noqa: SIM115 (held open for the run's life)
        try:
            _lock_for_writing(self._file, self.run_dir)  # before reading: a live writer moves on
            if existed:
                read = read_log(self.run_dir)
                if read.torn:
                    raise LogError(f"{self.path}: torn last line; repair it before appending")
                self._offsets = list(read.offsets)
                self._last_ts = read.events[-1].ts if read.events else 0.0
            else:
                self._offsets = []
                self._last_ts = 0.0
        except BaseException:
            self._file.close()
            raise
        self._size = self._file.tell()
        if not existed:
            _fsync_dir(self.run_dir)

    @property
    def next_seq(self) -> int:
        return len(self._offsets)

    def append(self, event: Event) -> Event:
        """Number, timestamp and durably write one event; returns the stored event."""
        # ts never goes backwards, so elapsed times folded from the log stay sane
        ts = max(self._clock(), self._last_ts)
        stored = dataclasses.replace(event, seq=self.next_seq, ts=ts)
        line = stored.to_json().encode("utf-8") + b"\n"
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._offsets.append(self._size)
        self._size += len(line)
        self._last_ts = ts
        return stored

    def read_from(self, seq: int, until: int | None = None) -> list[Event]:
        """Events seq..until-1 read back from the file (a lagging subscriber's catch-up)."""
        stop = self.next_seq if until is None else min(until, self.next_seq)
        if seq >= stop:
            return []
        out: list[Event] = []
        with open(self.path, "rb") as f:
            f.seek(self._offsets[seq])
            for _ in range(seq, stop):
                out.append(event_from_dict(upcast(json.loads(f.readline()), self.run_dir)))
        return out

    def write_source(self, attempt: int, source: str) -> str:
        """attempts/<n>.py, durable; returns its sha256."""
        write_durable(self.run_dir / ATTEMPTS_DIR / f"{attempt}.py", source.encode("utf-8"))
        return sha256_text(source)

    def write_verdict(self, attempt: int, verdict: dict[str, Any]) -> str:
        """attempts/<n>.json (the full verdict), durable; returns its sha256."""
        text = json.dumps(verdict, indent=1, sort_keys=True)
        write_durable(self.run_dir / ATTEMPTS_DIR / f"{attempt}.json", text.encode("utf-8"))
        return sha256_text(text)

    def write_meta(self, meta: dict[str, Any]) -> None:
        body = {"schema_version": META_SCHEMA_VERSION, **meta}
        write_durable(self.run_dir / META_FILE, json.dumps(body, indent=1).encode("utf-8"))

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
