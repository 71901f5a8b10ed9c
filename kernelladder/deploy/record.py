"""A deploy's result written into its run directory as a DeployChecked event, so replays,
`replay --json`, the headless summary and the app show it.

A run no process writes is appended to directly (the log's writer lock, held for the
append); a live run's engine records it itself, sent through the run's control channel
(engine/run/control.py), so the log keeps one writer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

WRITER_WAIT_S = 5.0  # a run that is closing its log: how long to wait for its lock


@dataclass(frozen=True)
class Recorded:
    seq: int | None  # the event's place in the log; None when it could not be recorded
    how: str  # "appended to the log" | "recorded by the live run" | why it was not


def event_fields(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "attempt": result.get("attempt"),
        "op": result.get("op") or "",
        "model": (result.get("model") or {}).get("name", ""),
        "status": result.get("status"),
        "summary": result.get("summary") or "",
        "result": result,
    }


def record(run_dir: str, result: dict[str, Any]) -> Recorded:
    """Append the result's DeployChecked event to the run's log (or have the live run do
    it). Never raises for a log it cannot write: the Recorded says why."""
    from kernelladder.engine import LogError, read_owner, writer_active

    fields = event_fields(result)
    deadline = time.monotonic() + WRITER_WAIT_S
    while True:
        if writer_active(run_dir):
            owner = read_owner(run_dir)
            if owner is not None:
                try:
                    seq = asyncio.run(_send(owner.control, fields))
                    return Recorded(int(seq), "recorded by the live run")
                except (ValueError, OSError) as exc:
                    why = " ".join(str(exc).split())
            else:
                why = "the run is live and offers no control channel"
        else:
            try:
                return Recorded(_append(run_dir, fields), "appended to the log")
            except ValueError as exc:  # the log does not take it (no such attempt): final
                return Recorded(None, f"not recorded in {run_dir}: {exc}")
            except LogError as exc:
                why = str(exc)
        if time.monotonic() >= deadline:
            return Recorded(None, f"not recorded in {run_dir}: {why}")
        time.sleep(0.2)  # a run closing its log, or one starting: ask again


def _append(run_dir: str, fields: dict[str, Any]) -> int:
    from kernelladder.engine import EventLog, deploy_event, fold, read_events

    log = EventLog(run_dir)  # takes the writer lock (LogError when a run holds it)
    try:
        state = fold(read_events(run_dir))
        return log.append(deploy_event(state, fields)).seq
    finally:
        log.close()


async def _send(path: str, fields: dict[str, Any]) -> Any:
    from kernelladder.engine import ControlClient

    client = ControlClient(path)
    try:
        return await client.send("record_deploy", fields)
    finally:
        await client.close()
