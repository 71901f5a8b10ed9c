"""torch.compile's baselines: the first worker of a GPU compiles an op's with the GPU to
itself (inductor benchmarks configs as it compiles), the others, once it is done, beside
other correctness runs (the shared compile caches hold what it chose).

The worker is a protocol double (torch.compile's baselines are compiled only on a GPU):
a few lines that speak the worker's JSON lines (hello; for "prepare", a "baselines"
stage asking for the GPU alone, then "prepared" or an exit), so the client's side (the
real WorkerClient and GpuArbiter) is what is tested.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

from helpers import RecordingArbiter

from kernelladder.verifier.contract.protocol import PROTOCOL_VERSION
from kernelladder.verifier.host.client import LocalTransport, WorkerClient
from kernelladder.verifier.host.gpu_arbiter import GpuArbiter

DOUBLE = textwrap.dedent(
    """
    import json, os, sys, time
    out = sys.stdout
    def send(msg):
        out.write(json.dumps(msg) + "\\n"); out.flush()
    send({"type": "hello", "protocol": PROTOCOL, "pid": os.getpid(), "device": "cuda"})
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("type") == "shutdown":
            break
        if msg.get("type") != "prepare":
            continue
        send({"type": "stage", "id": msg["id"], "stage": "baselines", "gpu": "exclusive"})
        go = json.loads(sys.stdin.readline())
        assert go["type"] == "go"
        time.sleep(0.3)  # compiling
        if MODE == "crash":
            os._exit(9)
        send({"type": "prepared", "id": msg["id"], "seconds": 0.3})
    """
)


class PrepareDouble(LocalTransport):
    def __init__(self, mode: str = "ok"):
        super().__init__("cpu", sandbox="off")
        self.mode = mode

    def _command(self, home: str) -> tuple[list[str], dict[str, str]]:
        code = DOUBLE.replace("PROTOCOL", str(PROTOCOL_VERSION)).replace("MODE", repr(self.mode))
        return [sys.executable, "-c", code], dict(os.environ)


def clients(arb: GpuArbiter, n: int, mode: str = "ok") -> list[WorkerClient]:
    return [WorkerClient(lambda: PrepareDouble(mode), arbiter=arb) for _ in range(n)]


async def test_the_first_compiles_alone_the_others_beside_each_other():
    arb = RecordingArbiter("cuda:0")
    first, *others = clients(arb, 3)
    try:
        assert "error" not in await first.prepare("rmsnorm", "cuda")
        assert arb.log == [(0, True)]
        assert arb.baselines_compiled() == {"rmsnorm"}
        answers = await asyncio.gather(*(c.prepare("rmsnorm", "cuda") for c in others))
    finally:
        await asyncio.gather(*(c.close() for c in (first, *others)))
    assert all("error" not in a for a in answers)
    assert arb.log[1:] == [(1, False), (2, False)]  # both at once, beside each other
    assert arb.holders == (0, False)


async def test_another_op_asks_for_the_gpu_alone_and_a_compile_under_way_is_waited_for():
    arb = RecordingArbiter("cuda:0")
    a, b, c = clients(arb, 3)
    try:
        await a.prepare("rmsnorm", "cuda")
        await b.prepare("softmax", "cuda")  # another op: its first compile
        # two first compiles of one op asked together: the second waits for the first,
        # then compiles beside whatever correctness runs (here none)
        await asyncio.gather(a.prepare("attention", "cuda"), c.prepare("attention", "cuda"))
    finally:
        await asyncio.gather(a.close(), b.close(), c.close())
    assert arb.log == [(0, True)] * 3 + [(1, False)]
    assert set(arb.baselines) == arb.baselines_compiled() == {"rmsnorm", "softmax", "attention"}


async def test_a_compile_that_did_not_finish_leaves_the_next_alone():
    arb = RecordingArbiter("cuda:0")
    (crashing,) = clients(arb, 1, "crash")
    (next_one,) = clients(arb, 1)
    try:
        assert "error" in await crashing.prepare("rmsnorm", "cuda")
        assert arb.baselines == {}  # nothing compiled, nothing under way
        await next_one.prepare("rmsnorm", "cuda")
    finally:
        await asyncio.gather(crashing.close(), next_one.close())
    assert arb.log == [(0, True), (0, True)]


async def test_one_waiting_for_a_compile_whose_worker_dies_compiles_alone():
    arb = RecordingArbiter("cuda:0")
    (crashing,) = clients(arb, 1, "crash")
    waiting = clients(arb, 2)
    try:
        crash = asyncio.ensure_future(crashing.prepare("rmsnorm", "cuda"))
        while arb.holders != (0, True):  # it compiles alone: the others ask now
            await asyncio.sleep(0.01)
        answers = await asyncio.wait_for(
            asyncio.gather(crash, *(w.prepare("rmsnorm", "cuda") for w in waiting)), timeout=60
        )
    finally:
        await asyncio.gather(crashing.close(), *(w.close() for w in waiting))
    assert "error" in answers[0] and all("error" not in a for a in answers[1:])
    # the crashed first, then one of the two waiting alone, then the other beside
    assert arb.log == [(0, True), (0, True), (1, False)]
    assert set(arb.baselines) == arb.baselines_compiled() == {"rmsnorm"}
