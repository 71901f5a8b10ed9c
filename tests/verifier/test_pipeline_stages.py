"""The pipelined verification's stages through real worker processes and the real
Triton interpreter (CPU): compile ahead, correctness beside other workers, the GPU's
arbiter, and a crash or a hang in any stage still a verdict, the pipeline going on.

The speed stage needs a GPU (no timing exists here): for it, and only for it, the
worker is a protocol double (a few lines of Python that speak the worker's JSON lines:
hello, then a stage line asking for the GPU to itself, then a crash or a hang), so the
client's side of the stage (the arbiter held, released, the deadline) is the real one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

import pytest
from helpers import CHEATS, RecordingArbiter

from kernelladder.verifier.contract.protocol import PROTOCOL_VERSION
from kernelladder.verifier.host.client import LocalTransport, WorkerClient
from kernelladder.verifier.host.gpu_arbiter import EXCLUSIVE, SHARED, GpuArbiter

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()


def counted(action: str, at_call: int) -> str:
    """The honest candidate, doing `action` at its at_call-th call (compile ahead calls
    it once per shape: 3 suite shapes and 2 unseen on the CPU, calls 1 to 5)."""
    prefix = textwrap.dedent(
        f"""
        import os, time
        _calls = [0]
        def _maybe():
            _calls[0] += 1
            if _calls[0] == {at_call}:
                {action}
        """
    )
    return prefix + HONEST.replace(
        "def kernel(x, weight):\n", "def kernel(x, weight):\n    _maybe()\n"
    )


CRASH = "os._exit(7)"
HANG = "time.sleep(3600)"


def client(arbiter: GpuArbiter, factory=None) -> WorkerClient:
    return WorkerClient(factory or (lambda: LocalTransport("cpu")), arbiter=arbiter)


def request(source: str, **extra) -> dict:
    return {"op": "rmsnorm", "source": source, "device": "cpu", "pipeline": True, **extra}


async def verify(c: WorkerClient, source: str, timeout_s: float = 120.0, progress=None):
    return await c.verify(request(source), on_progress=progress, timeout_s=timeout_s)


# --- the arbiter ---------------------------------------------------------------------------


async def test_correctness_shares_the_gpu_and_timing_has_it_alone():
    arb = GpuArbiter()
    await arb.acquire(SHARED)
    await arb.acquire(SHARED)  # two correctness runs at once
    assert arb.holders == (2, False)
    timing = asyncio.ensure_future(arb.acquire(EXCLUSIVE))
    await asyncio.sleep(0.01)
    assert not timing.done()  # waits for both
    late = asyncio.ensure_future(arb.acquire(SHARED))  # asked after the timing
    await asyncio.sleep(0.01)
    assert not late.done()  # a waiting timing goes first: correctness cannot starve it
    arb.release(SHARED)
    arb.release(SHARED)
    await asyncio.sleep(0.01)
    assert timing.done() and not late.done() and arb.holders == (0, True)
    arb.release(EXCLUSIVE)
    await asyncio.sleep(0.01)
    assert late.done() and arb.holders == (1, False)
    arb.release(SHARED)


async def test_waiting_timings_go_first_and_waiting_correctness_runs_together():
    """A timing asked after a waiting correctness still goes before it; the correctness
    requests gather meanwhile and are granted at once when no timing is left."""
    arb = GpuArbiter()
    await arb.acquire(EXCLUSIVE)  # worker A times
    first = asyncio.ensure_future(arb.acquire(SHARED))  # B's correctness waits
    await asyncio.sleep(0.01)
    timing = asyncio.ensure_future(arb.acquire(EXCLUSIVE))  # C's timing, asked later
    await asyncio.sleep(0.01)
    arb.release(EXCLUSIVE)
    await asyncio.sleep(0.01)
    assert timing.done() and not first.done() and arb.holders == (0, True)
    second = asyncio.ensure_future(arb.acquire(SHARED))  # A's next correctness
    await asyncio.sleep(0.01)
    assert not second.done()
    arb.release(EXCLUSIVE)
    await asyncio.sleep(0.01)
    assert first.done() and second.done() and arb.holders == (2, False)
    third = asyncio.ensure_future(arb.acquire(SHARED))  # no timing waits: it joins them
    await asyncio.sleep(0.01)
    assert third.done() and arb.holders == (3, False)
    for _ in range(3):
        arb.release(SHARED)
    assert arb.holders == (0, False)


async def test_a_cancelled_wait_leaves_the_queue_and_grants_the_next():
    arb = GpuArbiter()
    await arb.acquire(EXCLUSIVE)
    first = asyncio.ensure_future(arb.acquire(EXCLUSIVE))
    second = asyncio.ensure_future(arb.acquire(SHARED))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    arb.release(EXCLUSIVE)
    await asyncio.sleep(0.01)
    assert first.cancelled() and second.done() and arb.holders == (1, False)
    with pytest.raises(ValueError):
        await arb.acquire("sometimes")


# --- stages through real workers -------------------------------------------------------------


async def test_stages_are_reported_and_recorded():
    arb = RecordingArbiter()
    c = client(arb)
    lines: list[tuple[str, str]] = []
    try:
        v = await verify(c, HONEST, progress=lambda g, m: lines.append((g, m)))
    finally:
        await c.close()
    assert v.verdict == "pass", v.gates
    gates = [g for g, _ in lines]
    assert gates.index("compile") < gates.index("correctness")  # the order of the stages
    assert any(
        "called ahead (the interpreter compiles nothing) for 5 of 5 shapes" in m
        for g, m in lines
        if g == "compile"
    )
    # no speed stage on the CPU; the last audit of torch's state holds no GPU
    assert set(v.stages) == {"compile", "correctness", "wait", "audit"}
    assert arb.log == [(1, False)] and arb.holders == (0, False)  # shared, then released


async def test_an_autotuning_candidate_has_the_gpu_to_itself_for_correctness():
    arb = RecordingArbiter()
    c = client(arb)
    try:
        v = await verify(c, "# it autotunes (its benchmarks want the GPU alone)\n" + HONEST)
    finally:
        await c.close()
    assert v.verdict == "pass", v.gates
    assert arb.log == [(0, True)] and arb.holders == (0, False)


async def test_two_workers_on_one_gpu_never_time_beside_anything():
    arb = RecordingArbiter()
    a, b = client(arb), client(arb)
    try:
        va, vb = await asyncio.gather(verify(a, HONEST), verify(b, "# autotune\n" + HONEST))
    finally:
        await asyncio.gather(a.close(), b.close())
    assert va.verdict == vb.verdict == "pass"
    assert all(not (exclusive and shared) for shared, exclusive in arb.log)
    assert (0, True) in arb.log and arb.holders == (0, False)


@pytest.mark.parametrize(
    ("action", "at_call", "stage", "kind"),
    [
        (CRASH, 1, "compile", "crash"),  # the first call is compile ahead's
        (CRASH, 7, "correctness", "crash"),
        (HANG, 7, "correctness", "timeout"),
    ],
)
async def test_a_crash_or_hang_in_a_stage_is_a_verdict_and_the_pipeline_goes_on(
    action, at_call, stage, kind
):
    arb = RecordingArbiter()
    c = client(arb)
    try:
        bad = await verify(c, counted(action, at_call), timeout_s=30.0)
        assert (bad.verdict, bad.kind) == ("fail", kind), bad.gates
        assert bad.gates[kind].evidence["during"] == stage
        assert arb.holders == (0, False)  # the GPU went back with the worker
        good = await verify(c, HONEST)  # a fresh worker takes the next candidate
    finally:
        await c.close()
    assert good.verdict == "pass", good.gates
    assert c.workers_started == 2


# --- the speed stage: a protocol double (no GPU here) --------------------------------------

DOUBLE = textwrap.dedent(
    """
    import json, os, sys, time
    out = sys.stdout
    def send(msg):
        out.write(json.dumps(msg) + "\\n"); out.flush()
    send({"type": "hello", "protocol": PROTOCOL, "pid": os.getpid(), "device": "cuda"})
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("type") != "verify":
            continue
        send({"type": "stage", "id": msg["id"], "stage": "speed", "gpu": "exclusive"})
        go = json.loads(sys.stdin.readline())
        assert go["type"] == "go"
        if MODE == "echo":  # what the client handed with the GPU
            send({"type": "progress", "id": msg["id"], "gate": "speed",
                  "message": json.dumps(go.get("known"))})
        send({"type": "progress", "id": msg["id"], "gate": "speed", "message": "timing"})
        if MODE in ("crash", "echo"):
            os._exit(9)
        time.sleep(3600)
    """
)


class DoubleTransport(LocalTransport):
    """A worker double speaking the protocol (see the module's docstring), spawned and
    killed as a real worker is (the hanging ones once outlived their tests by an hour:
    the transport's kill did not reach a process it had not spawned itself)."""

    def __init__(self, mode: str):
        super().__init__("cpu", sandbox="off")
        self.mode = mode

    def _command(self, home: str) -> tuple[list[str], dict[str, str]]:
        code = DOUBLE.replace("PROTOCOL", str(PROTOCOL_VERSION)).replace("MODE", repr(self.mode))
        return [sys.executable, "-c", code], dict(os.environ)


@pytest.mark.parametrize(("mode", "kind"), [("crash", "crash"), ("hang", "timeout")])
async def test_a_crash_or_hang_while_timing_frees_the_gpu_for_the_next(mode, kind):
    arb = GpuArbiter("cuda:0")
    timing = client(arb, lambda: DoubleTransport(mode))
    other = client(arb, lambda: DoubleTransport("hang"))
    try:
        v = await timing.verify(request(HONEST), timeout_s=3.0)
        assert (v.kind, v.gates[kind].evidence["during"]) == (kind, "speed")
        assert arb.holders == (0, False)
        # the next worker gets the GPU to itself at once (then hangs: its timeout)
        lines: list[str] = []
        v2 = await other.verify(
            request(HONEST), on_progress=lambda g, m: lines.append(m), timeout_s=1.5
        )
        assert v2.kind == "timeout" and "waiting for the GPU (to itself)" not in lines
    finally:
        await asyncio.gather(timing.close(), other.close())


async def test_waiting_for_the_gpu_is_not_the_candidates_time():
    arb = GpuArbiter("cuda:0")
    await arb.acquire(EXCLUSIVE)  # someone else is timing
    c = client(arb, lambda: DoubleTransport("hang"))
    lines: list[str] = []
    try:
        task = asyncio.ensure_future(
            c.verify(request(HONEST), on_progress=lambda g, m: lines.append(m), timeout_s=1.0)
        )
        await asyncio.sleep(1.5)  # past the timeout, but it has not had the GPU yet
        assert not task.done() and "waiting for the GPU (to itself)" in lines
        arb.release(EXCLUSIVE)
        v = await task
    finally:
        await c.close()
    assert v.kind == "timeout"  # a second of its own once it had the GPU
    assert arb.holders == (0, False)


# --- what workers on one GPU hand each other ------------------------------------------------


async def test_the_timing_turn_hands_over_what_others_measured_while_it_waited():
    """The facts a worker's request carried are those known when it was sent; a worker
    that waits for its first timing while another's verdict comes in is handed that
    verdict's times with the GPU, and does not measure them again."""
    import json

    arb = GpuArbiter("cuda:0")
    await arb.acquire(EXCLUSIVE)  # another worker is timing its first candidate
    c = client(arb, lambda: DoubleTransport("echo"))
    lines: list[str] = []
    try:
        task = asyncio.ensure_future(
            c.verify(request(HONEST), on_progress=lambda g, m: lines.append(m), timeout_s=30)
        )
        await asyncio.sleep(1.0)
        assert not task.done()
        arb.facts.learn("rmsnorm", _timed("s", 3.4, {"torch.compile": 0.25}, {"copy": 4.2e9}))
        arb.release(EXCLUSIVE)  # its verdict came: the GPU is this one's turn
        v = await task
    finally:
        await c.close()
    assert v.kind == "crash"  # the double ends there
    handed = json.loads(next(m for m in lines if m.startswith("{")))
    assert handed["rates"] == {"copy": 4.2e9}
    assert handed["shapes"]["s"]["reference_ms"] == 3.4
    assert handed["shapes"]["s"]["baselines_ms"] == {"torch.compile": 0.25}


KNOWN_AT_THE_TURN = r"""
import json, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton
from kernelladder.verifier.worker import fence, interp_patch, poison
interp_patch.apply(); poison.setup_cpu_malloc(); fence.install_launch_counter()
from kernelladder.ops.registry import get_op
from kernelladder.verifier.worker.gates import Verifier, VerifyOptions
from kernelladder.verifier.worker.timing import Timing

TIMED = []
class NamingTimer:
    _rates = None
    def time(self, fn, target_ms=100.0):
        code = getattr(fn, "__code__", None)
        names = (code.co_names + code.co_freevars) if code else ()
        TIMED.append("candidate" if "call" in names else
                     "reference" if "reference" in names else "baseline")
        fn()
        return Timing(1.0, 0.01, int(target_ms))
    def rates(self):
        return {"copy": 1e9}
    def floor_ms(self, nbytes, flops, unit):
        return None

spec = get_op("rmsnorm")
known = {"rates": {"copy": 1e9}, "shapes": {s.label: {
    "reference_ms": 2.0, "baselines_ms": {"F.rms_norm": 0.5, "torch.compile": 0.6},
    "age_s": 1.0} for s in spec.cpu_shapes}}
asked = []
def stage(name, gpu):
    asked.append((name, gpu))
    return known if name == "speed" else None
v = Verifier("cpu", tempfile.mkdtemp(), {}, timer=NamingTimer())
opts = VerifyOptions(op="rmsnorm", source=open(sys.argv[1]).read(), device="cpu",
                     min_speedup=0.0, seeds=(0,), pipeline=True)
verdict = v.verify(opts, None, stage).verdict
print(json.dumps({"verdict": verdict.verdict, "asked": asked, "timed": TIMED,
                  "reference_ms": [t.reference_ms for t in verdict.timings]}))
"""


def test_a_worker_handed_facts_at_its_timing_turn_does_not_time_them_again():
    import json
    import os
    import subprocess

    from helpers import ROOT

    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", KNOWN_AT_THE_TURN, str(CHEATS / "honest_rmsnorm.py")],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["verdict"] == "pass"
    assert ["speed", "exclusive"] in out["asked"]
    assert out["reference_ms"] == [2.0, 2.0, 2.0]  # the handed times, at every shape
    assert "reference" not in out["timed"] and "baseline" not in out["timed"]
    assert "candidate" in out["timed"]


def _timed(label: str, ref: float, base: dict, rates: dict | None = None):
    from kernelladder.verifier.contract.verdict import GATES, GateResult, ShapeTiming, Verdict

    timing = ShapeTiming(
        label=label, reference_ms=ref, candidate_ms=1.0, noise=0.01, speedup=ref,
        floor_ms=None, floor_fraction=None, baselines_ms=base,
    )  # fmt: skip
    return Verdict(
        verdict="pass", kind="pass", gate=None, gates={g: GateResult("pass", "") for g in GATES},
        op="rmsnorm", device="cuda", source_hash="", timings=(timing,),
        environment={"rates": rates or {"copy": 4.1e9}},
    )  # fmt: skip


def test_gpu_facts_are_learned_from_a_verdict_and_age(monkeypatch):
    from kernelladder.verifier.host import gpu_arbiter

    clock = [100.0]
    monkeypatch.setattr(gpu_arbiter.time, "monotonic", lambda: clock[0])
    facts = gpu_arbiter.GpuFacts()
    assert facts.known("rmsnorm") == {"rates": None, "shapes": {}}
    facts.learn("rmsnorm", _timed("s", 3.4, {"torch.compile": 0.25}, {"copy": 4.2e9}))
    clock[0] += 30
    known = facts.known("rmsnorm")
    assert known["rates"] == {"copy": 4.2e9}
    assert known["shapes"]["s"] == {
        "reference_ms": 3.4, "baselines_ms": {"torch.compile": 0.25}, "age_s": 30.0,
    }  # fmt: skip
    assert facts.known("softmax")["shapes"] == {}  # per op
    facts.learn("rmsnorm", _timed("s", 9.9, {"torch.compile": 9.9}))  # still fresh: kept
    assert facts.known("rmsnorm")["shapes"]["s"]["reference_ms"] == 3.4
    clock[0] += gpu_arbiter.FACTS_FRESH_S
    assert facts.known("rmsnorm")["shapes"] == {}  # too old to hand on
    facts.learn("rmsnorm", _timed("s", 3.5, {"torch.compile": 0.26}))
    assert facts.known("rmsnorm")["shapes"]["s"]["reference_ms"] == 3.5


TAKE_KNOWN = r"""
import json, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton
from kernelladder.ops.registry import get_op
from kernelladder.verifier.worker import gates
from kernelladder.verifier.worker.gates import Verifier
from kernelladder.verifier.worker.timing import Timing

class CountingTimer:
    calls = 0
    _rates = None
    def time(self, fn, target_ms=100.0):
        CountingTimer.calls += 1
        return Timing(7.0, 0.0, 10)

spec = get_op("rmsnorm")
shape = spec.cpu_shapes[0]
v = Verifier("cpu", tempfile.mkdtemp(), {}, timer=CountingTimer())
v.take_known(spec, {"rates": {"copy": 1.0}, "shapes": {shape.label: {
    "reference_ms": 3.0, "baselines_ms": {"torch.compile": 0.5}, "age_s": 10.0}}})
inputs = spec.make_inputs(shape, 0, "cpu")
out = [v.reference_timing(spec, shape, inputs).median_ms, CountingTimer.calls,
       v._baseline_ms[(gates._spec_key(spec), shape.label, "torch.compile")], v._known_rates]
v._taken[(gates._spec_key(spec), shape.label, "reference")] = (0.0, 0)  # long ago
out += [v.reference_timing(spec, shape, inputs).median_ms, CountingTimer.calls]
print(json.dumps(out))
"""


def test_a_worker_starts_from_another_workers_times_and_refreshes_them():
    import json
    import os
    import subprocess

    from helpers import ROOT

    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", TAKE_KNOWN], capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    seeded, calls, baseline, rates, refreshed, calls_after = json.loads(
        proc.stdout.splitlines()[-1]
    )
    assert (seeded, calls, baseline, rates) == (3.0, 0, 0.5, {"copy": 1.0})  # nothing timed
    assert (refreshed, calls_after) == (7.0, 1)  # past its schedule: timed here


async def test_a_profile_has_every_local_gpu_alone():
    """`--profile auto` runs Nsight Compute on the GPU: the local runner's gpu_alone holds
    each GPU's arbiter exclusively, so no worker sharing it times or checks beside it."""
    from kernelladder.engine.runners.local import LocalRunner

    runner = LocalRunner(device="cpu", slots=1, per_gpu=2)
    await runner.start()
    try:
        arbiter = runner._pool.clients[0].arbiter
        assert arbiter is runner._pool.clients[1].arbiter
        async with runner.gpu_alone():
            assert arbiter.holders == (0, True)
            waiting = asyncio.ensure_future(arbiter.acquire(SHARED))  # a correctness stage
            await asyncio.sleep(0.05)
            assert not waiting.done()
        await asyncio.wait_for(waiting, 1)
        arbiter.release(SHARED)
        assert arbiter.holders == (0, False)
    finally:
        await runner.close()
