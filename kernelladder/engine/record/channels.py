"""Subscriber channels: a bounded queue each; the engine never waits for a subscriber.

Publishing is `put_nowait`. When a subscriber's queue is full it is marked lagging and
stops receiving live events; once it has drained what it holds it re-reads the events
it missed from the log file (every published event is already there), then goes live
again. So a slow subscriber loses nothing and never slows the engine.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from kernelladder.engine.record.events import Event

ReadFrom = Callable[[int, int | None], list[Event]]  # (from_seq, until_seq) -> events


class Subscription:
    """An async iterator of events in seq order, without gaps, until the run ends."""

    def __init__(self, read_from: ReadFrom, next_live_seq: int, from_seq: int, maxsize: int):
        self._read_from = read_from
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=max(1, maxsize))
        self._backlog: deque[Event] = deque()
        self.next_seq = from_seq  # the next event this subscriber will yield
        # a late subscriber starts by reading what was logged before it subscribed
        self.lagging = from_seq < next_live_seq
        self.lag_count = 1 if self.lagging else 0  # times it fell behind (for tests/UI)
        self._closed = False
        self._wakeup = asyncio.Event()

    # --- engine side ------------------------------------------------------------------
    def offer(self, event: Event) -> None:
        if self._closed or self.lagging:
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagging = True
            self.lag_count += 1
        self._wakeup.set()

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()

    # --- subscriber side --------------------------------------------------------------
    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._backlog:
                return self._take(self._backlog.popleft())
            if not self._queue.empty():
                event = self._queue.get_nowait()
                if event.seq < self.next_seq:
                    continue  # already delivered from the file
                if event.seq > self.next_seq:
                    # a gap: fill it from the log, then this event
                    self._backlog.extend(self._read_from(self.next_seq, event.seq))
                    self._backlog.append(event)
                    continue
                return self._take(event)
            if self.lagging:
                # the queue is drained: catch up from the file, then go live again
                missed = self._read_from(self.next_seq, None)
                self.lagging = False
                if missed:
                    self._backlog.extend(missed)
                    continue
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()

    def _take(self, event: Event) -> Event:
        self.next_seq = event.seq + 1
        return event

    async def aclose(self) -> None:
        self.close()


class Broadcaster:
    """The engine's side: offer every published event to every subscription."""

    def __init__(self, read_from: ReadFrom, next_seq: Callable[[], int]):
        self._read_from = read_from
        self._next_seq = next_seq
        self._subs: list[Subscription] = []
        self._closed = False

    def subscribe(self, maxsize: int = 10_000, from_seq: int = 0) -> Subscription:
        sub = Subscription(self._read_from, self._next_seq(), from_seq, maxsize)
        if self._closed:
            sub.close()
        else:
            self._subs.append(sub)
        return sub

    def publish(self, event: Event) -> None:
        for sub in self._subs:
            sub.offer(event)

    def close(self) -> None:
        self._closed = True
        for sub in self._subs:
            sub.close()
        self._subs.clear()
