"""A live run's one way to record a fact: the event appended to the log (fsync'd), folded
into the state with the fold replay uses, offered to subscribers, and whoever waits for
a change woken."""

from __future__ import annotations

import asyncio

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.channels import Broadcaster, Subscription
from kernelladder.engine.record.log import EventLog
from kernelladder.engine.record.state import RunState, apply


class Recorder:
    def __init__(self, log: EventLog, state: RunState) -> None:
        self._log = log
        self._state = state
        self._bus = Broadcaster(log.read_from, lambda: log.next_seq)
        self._waiters: list[asyncio.Future[None]] = []

    def emit(self, event: ev.Event) -> ev.Event:
        """Record the event; returns it as stored (its seq and time stamped)."""
        stored = self._log.append(event)
        apply(self._state, stored)
        self._bus.publish(stored)
        self.wake()
        return stored

    def subscribe(self, maxsize: int = 10_000, from_seq: int = 0) -> Subscription:
        return self._bus.subscribe(maxsize=maxsize, from_seq=from_seq)

    def close(self) -> None:
        """The run has ended: subscriptions end once they have read every event."""
        self._bus.close()

    def wake(self) -> None:
        """Whoever waits for a change looks again (also without an event)."""
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def wait_change(self, timeout: float | None = None) -> None:
        """Until the next event is recorded (or a wake), at most `timeout` seconds."""
        f = asyncio.get_running_loop().create_future()
        self._waiters.append(f)
        try:
            async with asyncio.timeout(timeout):  # never swallows a cancel, unlike 3.11's wait_for
                await f
        except TimeoutError:
            pass

    async def wait_change_or(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until one of `tasks` is done or the next event is recorded (a stop's among them)."""
        change = asyncio.get_running_loop().create_future()
        self._waiters.append(change)
        await asyncio.wait([*tasks, change], return_when=asyncio.FIRST_COMPLETED)
        if not change.done():
            change.cancel()
