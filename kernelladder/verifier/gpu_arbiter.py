"""Who may use one GPU now, among the workers that share it (the caller's side).

A pipelined verification asks for the GPU per stage: correctness runs beside other
workers' correctness ("shared"), timing has the GPU to itself ("exclusive"). Requests
are granted in order of asking, except that shared ones are granted together; a timing
that waits goes before shared requests made after it, so correctness cannot starve it.
Standard library only (the engine imports it through the client).
"""

from __future__ import annotations

import asyncio
import collections

SHARED, EXCLUSIVE = "shared", "exclusive"


class GpuArbiter:
    """One GPU's use, in asyncio (one event loop); release() needs no await."""

    def __init__(self, name: str = "gpu") -> None:
        self.name = name
        self._shared = 0
        self._exclusive = False
        self._queue: collections.deque[tuple[str, asyncio.Future[None]]] = collections.deque()

    @property
    def holders(self) -> tuple[int, bool]:
        """(shared holders, whether one holds it exclusively)."""
        return self._shared, self._exclusive

    def _can(self, mode: str) -> bool:
        if self._exclusive:
            return False
        return mode == SHARED or self._shared == 0

    def _take(self, mode: str) -> None:
        if mode == SHARED:
            self._shared += 1
        else:
            self._exclusive = True

    def busy_for(self, mode: str) -> bool:
        """Whether asking for `mode` now would wait."""
        return bool(self._queue) or not self._can(mode)

    async def acquire(self, mode: str) -> None:
        if mode not in (SHARED, EXCLUSIVE):
            raise ValueError(f"unknown GPU access {mode!r}")
        if not self._queue and self._can(mode):
            self._take(mode)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((mode, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(mode)  # granted as the caller was cancelled
            else:
                self._queue = collections.deque(e for e in self._queue if e[1] is not future)
                self._grant()
            raise

    def release(self, mode: str) -> None:
        if mode == SHARED:
            self._shared = max(0, self._shared - 1)
        else:
            self._exclusive = False
        self._grant()

    def _grant(self) -> None:
        while self._queue:
            mode, future = self._queue[0]
            if future.done():
                self._queue.popleft()
                continue
            if not self._can(mode):
                return
            self._queue.popleft()
            self._take(mode)
            future.set_result(None)
            if mode == EXCLUSIVE:
                return
