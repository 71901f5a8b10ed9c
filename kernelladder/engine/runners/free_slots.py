"""The free slots of a runner whose slots can leave (the SSH pool's hosts, Ray's actors),
and the verify() such a runner shares.

An attempt takes the first free slot, or waits until one is given back or none is left
alive; then it raises RunnerLost saying why each left. A slot whose host or actor left is
not given back, and whatever drops slots wakes the waiters so they see it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from kernelladder.engine.protocols import (
    ProgressFn,
    RunnerBase,
    RunnerLost,
    SlotFn,
    VerifyRequest,
)
from kernelladder.verifier.contract.verdict import Verdict

SlotT = TypeVar("SlotT")


class FreeSlots(Generic[SlotT]):
    """Free slots, first free first, lent to one attempt at a time."""

    def __init__(self, alive: Callable[[SlotT], bool], why_none: Callable[[], str]):
        self._alive = alive  # is this slot still there (its host or actor has not left)?
        self._why_none = why_none  # RunnerLost's line when no slot is
        self._slots: list[SlotT] = []  # every slot, lent or free
        self._free: list[SlotT] = []
        self._changed: asyncio.Condition | None = None

    def fill(self, slots: Iterable[SlotT]) -> None:
        """Every slot free (a runner that started); the waits belong to this loop."""
        self._slots = list(slots)
        self._free = list(self._slots)
        self._changed = asyncio.Condition()

    def clear(self) -> None:
        self._slots, self._free = [], []

    def _any_alive(self) -> bool:
        return any(self._alive(s) for s in self._slots)

    async def take(self) -> SlotT:
        changed = self._changed
        assert changed is not None, "fill() comes first"
        async with changed:
            await changed.wait_for(lambda: bool(self._free) or not self._any_alive())
            if not self._any_alive():
                raise RunnerLost(self._why_none())
            return self._free.pop(0)

    def give_back(self, slot: SlotT) -> None:
        if self._alive(slot):
            self._free.append(slot)
        self.wake()

    def drop(self) -> None:
        """Forget the free slots that left (their host or actor is gone)."""
        self._free = [s for s in self._free if self._alive(s)]
        self.wake()

    def wake(self) -> None:
        """Let every waiting attempt look again (a slot came back, or slots left)."""
        changed = self._changed
        if changed is None:
            return

        async def notify() -> None:
            async with changed:
                changed.notify_all()

        asyncio.ensure_future(notify())


class SlotPoolRunner(RunnerBase):
    """A runner whose attempts each borrow a slot of `_free` (its slots have a `label`):
    verify() starts it when needed, takes a slot that is ready, names it, verifies there
    and gives it back. A subclass implements start() and _verify_on(), and _slot_ready()
    where a slot may need its host reconnected first."""

    _started: bool
    _free: FreeSlots[Any]

    async def verify(
        self,
        request: VerifyRequest,
        on_progress: ProgressFn | None = None,
        on_slot: SlotFn | None = None,
    ) -> Verdict:
        if not self._started:
            await self.start()
        while True:
            slot = await self._free.take()
            try:
                if not await self._slot_ready(slot):
                    continue  # its host left the pool: take a slot of another one
                if on_slot is not None:
                    on_slot(slot.label)  # where this attempt runs: "host:gpu", "ip:gpuN"
                return await self._verify_on(slot, request, on_progress)
            finally:
                self._free.give_back(slot)

    async def start(self) -> None:
        raise NotImplementedError

    async def _slot_ready(self, slot: Any) -> bool:
        return True

    async def _verify_on(
        self, slot: Any, request: VerifyRequest, on_progress: ProgressFn | None
    ) -> Verdict:
        raise NotImplementedError
