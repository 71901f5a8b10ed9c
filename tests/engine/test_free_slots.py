"""FreeSlots: the free slots of the SSH pool and the Ray runner (real asyncio, no doubles)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kernelladder.engine.protocols import RunnerLost
from kernelladder.engine.runners.free_slots import FreeSlots


@dataclass
class Slot:
    name: str
    gone: str | None = None


def _pool(slots: list[Slot]) -> FreeSlots[Slot]:
    free: FreeSlots[Slot] = FreeSlots(
        lambda s: s.gone is None,
        lambda: "none left (" + "; ".join(f"{s.name}: {s.gone}" for s in slots) + ")",
    )
    free.fill(slots)
    return free


async def test_slots_are_lent_first_free_first_and_a_wait_ends_when_one_comes_back():
    slots = [Slot("a"), Slot("b")]
    free = _pool(slots)
    first, second = await free.take(), await free.take()
    assert (first.name, second.name) == ("a", "b")
    waiting = asyncio.ensure_future(free.take())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # both lent: the third attempt waits
    free.give_back(second)
    assert (await asyncio.wait_for(waiting, 2)).name == "b"


async def test_a_slot_that_left_is_not_lent_again():
    slots = [Slot("a"), Slot("b")]
    free = _pool(slots)
    a = await free.take()
    a.gone = "host unreachable"
    free.give_back(a)
    assert (await free.take()).name == "b"
    waiting = asyncio.ensure_future(free.take())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # b is lent and alive: wait for it, not for a


async def test_waiting_attempts_learn_when_every_slot_has_left():
    slots = [Slot("a"), Slot("b")]
    free = _pool(slots)
    a, b = await free.take(), await free.take()
    waiting = asyncio.ensure_future(free.take())
    await asyncio.sleep(0.05)
    a.gone, b.gone = "actor died", "node lost"
    free.drop()  # both left while lent: the waiter is woken
    with pytest.raises(RunnerLost, match=r"none left \(a: actor died; b: node lost\)"):
        await asyncio.wait_for(waiting, 2)
    with pytest.raises(RunnerLost):
        await free.take()
