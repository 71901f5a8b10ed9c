"""The bridge between a running engine and the app.

The engine publishes events one by one, thousands a second at peak; the app wants a
few updates a second. The bridge's pump reads every event from the run's subscription
into a buffer; its flush loop hands the buffer over as ONE batch every `interval`
seconds, and only once the app has handled the previous batch, so a busy screen gets
bigger batches instead of a growing queue. Nothing is dropped.

The engine can run on the app's own event loop (the default) or on a loop of its own
in a thread (for libraries that disagree with the app's eager task factory on Python
3.12): the app starts the same two coroutines either way, and `send` routes steering
commands to whichever loop the engine lives on. Nothing here imports textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol

from kernelladder.engine import STEERING_COMMANDS, Event

DEFAULT_INTERVAL_S = 0.066  # ~15 batches a second
# After the run returns, how long the pump may take to drain its channel (the engine
# closes it at the end; after a crash it may not).
DRAIN_GRACE_S = 5.0
DRAIN_GRACE_AFTER_ERROR_S = 0.5

Deliver = Callable[[tuple[Event, ...], bool], None]  # (batch, stream finished)

# The RunControl commands the app may send (the same list the control channel serves).
COMMANDS = STEERING_COMMANDS


class SteerableRun(Protocol):
    """A run as the bridge sees it: RunControl plus the coroutine that drives it."""

    async def run(self) -> Any: ...

    def subscribe(self, maxsize: int = 10_000) -> AsyncIterator[Event]: ...


@dataclass(eq=False, repr=False)
class EngineBridge:
    run: SteerableRun
    _: KW_ONLY
    interval: float = DEFAULT_INTERVAL_S
    own_loop: bool = False
    maxsize: int = 10_000
    # awaited on the engine's loop before the run starts (the app's host-key check); it
    # reports its own errors and never raises them
    prepare: Callable[[], Awaitable[None]] | None = None
    # the first event to pump: a resumed run's earlier sessions are folded by the app
    # before its first frame, so only this session's events come through here
    from_seq: int = 0

    def __post_init__(self) -> None:
        self._buffer: deque[Event] = deque()
        self._stream_done = threading.Event()
        self._engine_loop: asyncio.AbstractEventLoop | None = None
        self._handled: asyncio.Event | None = None
        self._engine_task: asyncio.Task | None = None
        self.events_pumped = 0
        self.events_delivered = 0
        self.batches_delivered = 0
        self.largest_batch = 0

    # --- the engine side (runs on the engine's loop) -----------------------------------

    async def engine_main(self) -> Any:
        """Subscribe, then drive the run to its end; returns what run() returned."""
        self._engine_loop = asyncio.get_running_loop()
        pump = asyncio.create_task(self._pump(), name="kernelladder-bridge-pump")
        await asyncio.sleep(0)  # let the subscription open before the first event
        grace = DRAIN_GRACE_AFTER_ERROR_S
        try:
            self._engine_task = asyncio.current_task()
            if self.prepare is not None:
                await self.prepare()
            result = await self.run.run()
            grace = DRAIN_GRACE_S
        finally:
            try:
                await asyncio.wait_for(asyncio.shield(pump), grace)
            except TimeoutError:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            self._stream_done.set()
        return result

    def engine_thread_main(self) -> Any:
        """engine_main on a new event loop of its own: the body of a thread worker."""
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(self.engine_main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _pump(self) -> None:
        try:
            if self.from_seq:
                events = self.run.subscribe(self.maxsize, from_seq=self.from_seq)  # type: ignore[call-arg]
            else:
                events = self.run.subscribe(self.maxsize)
            async for event in events:
                self._buffer.append(event)
                self.events_pumped += 1
        finally:
            self._stream_done.set()

    # --- the app side (runs on the app's loop) -----------------------------------------

    async def flush_loop(self, deliver: Deliver) -> None:
        """Hands buffered events to `deliver` as one batch per interval until the stream
        ends; waits for `batch_handled()` between batches."""
        self._handled = asyncio.Event()
        self._handled.set()
        while True:
            await asyncio.sleep(self.interval)
            await self._handled.wait()
            finished = self._stream_done.is_set()  # read before draining: no lost tail
            batch = self._drain()
            if batch or finished:
                self._handled.clear()
                self.events_delivered += len(batch)
                self.batches_delivered += 1
                self.largest_batch = max(self.largest_batch, len(batch))
                deliver(batch, finished)
            if finished:
                return

    def batch_handled(self) -> None:
        if self._handled is not None:
            self._handled.set()

    def _drain(self) -> tuple[Event, ...]:
        n = len(self._buffer)
        popleft = self._buffer.popleft
        return tuple(popleft() for _ in range(n))

    @property
    def finished(self) -> bool:
        return self._stream_done.is_set() and not self._buffer

    # --- steering ----------------------------------------------------------------------

    async def send(self, command: str, *args: Any, **kwargs: Any) -> Any:
        """Calls a RunControl command on the engine's loop and awaits its result."""
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        method = getattr(self.run, command)
        loop = self._engine_loop
        if not self.own_loop or loop is asyncio.get_running_loop():
            return await method(*args, **kwargs)
        if loop is None:
            raise ValueError("the run has not started yet")
        future = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), loop)
        return await asyncio.wrap_future(future)
