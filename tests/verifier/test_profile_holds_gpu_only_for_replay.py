"""A profile asks for the GPU only while it uses it: nothing while ncu and the profiled
process start (Python, torch, the candidate), the GPU beside correctness runs while it
warms up, the GPU to itself only for the profiled call.

Real parts: the real driver (`python3 -m kernelladder.verifier.worker.profile_driver drive`) runs the
real rmsnorm start candidate in Triton's interpreter on the CPU, and the engine side is
the real GpuArbiter the local pool's workers share. The stand-in: this machine has no
ncu, so a small script plays it (sleeps as ncu's own start does, runs the driver, writes
the report) -- the handshake, the phases and the holds are exercised for real."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from kernelladder.ops.registry import start_path
from kernelladder.verifier.contract.profile_phases import DONE, READY, WARM
from kernelladder.verifier.host.gpu_arbiter import EXCLUSIVE, SHARED, GpuArbiter
from kernelladder.verifier.host.profile import profile_candidate_async

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"
NCU_START_S = 0.5

# plays ncu: its own start, then the application (the arguments after -o REPORT), then
# the report written as the application exits; --import prints the captured CSV
FAKE_NCU = """#!{python}
import pathlib, subprocess, sys, time
args = sys.argv[1:]
data = pathlib.Path({data!r})
if "--import" in args:
    page = args[args.index("--page") + 1]
    sys.stdout.write((data / f"rmsnorm_{{page}}.csv").read_text())
    sys.exit(0)
assert "--set" not in args and args[args.index("--launch-count") + 1] == "1"
assert args[args.index("--kernel-name") + 1] == "regex:^(_rmsnorm_rows)$"
time.sleep({start_s})
base = args[args.index("-o") + 1]
app = args[args.index("-o") + 2:]
code = subprocess.call(app)
pathlib.Path(base + ".ncu-rep").write_bytes(b"report")
print("==PROF== Disconnected from process 1")
sys.exit(code)
"""


def _fake_ncu(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, data=str(DATA), start_s=NCU_START_S))
    ncu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("KERNELLADDER_PROFILE_DEVICE", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


async def test_a_profile_holds_no_gpu_while_the_profiler_starts(tmp_path, monkeypatch):
    _fake_ncu(tmp_path, monkeypatch)
    source = (start_path("rmsnorm")).read_text()
    out = tmp_path / "profiles"
    base = str(out / "3")
    arbiter = GpuArbiter("cuda:0")
    held: list[tuple[str, float]] = []  # (what, when) as the profile's holds change
    seen: dict[str, tuple[bool, bool, bool]] = {}  # at each hold: ready, warm, done yet
    samples: list[tuple[float, tuple[int, bool], bool, bool, bool]] = []

    @contextlib.asynccontextmanager
    async def hold(mode: str):
        await arbiter.acquire(mode)
        held.append((f"{mode} taken", time.monotonic()))
        seen[f"{mode} taken"] = tuple(os.path.exists(base + s) for s in (READY, WARM, DONE))
        try:
            yield
        finally:
            seen[f"{mode} given back"] = tuple(
                os.path.exists(base + s) for s in (READY, WARM, DONE)
            )
            arbiter.release(mode)
            held.append((f"{mode} given back", time.monotonic()))

    async def watch() -> None:
        while True:
            on = [os.path.exists(base + s) for s in (READY, WARM, DONE)]
            samples.append((time.monotonic(), arbiter.holders, *on))
            await asyncio.sleep(0.002)

    async def another_worker_times() -> float:
        """A worker's timing asked for while the profiler starts: how long it waited."""
        await asyncio.sleep(0.2)
        t = time.monotonic()
        await arbiter.acquire(EXCLUSIVE)
        waited = time.monotonic() - t
        await asyncio.sleep(0.3)  # the timing
        arbiter.release(EXCLUSIVE)
        return waited

    watcher = asyncio.ensure_future(watch())
    worker = asyncio.ensure_future(another_worker_times())
    stages: list[str] = []
    started = time.monotonic()
    outcome = await profile_candidate_async(
        "rmsnorm", source, out, "3", timeout_s=240,
        shared=lambda: hold(SHARED), exclusive=lambda: hold(EXCLUSIVE), on_stage=stages.append,
    )  # fmt: skip
    watcher.cancel()
    assert outcome.status == "ok", (outcome.reason, (out / "3.ncu.log").read_text())
    assert stages == ["start", "warm", "replay", "export"]
    # the other worker's timing came while the profiler started, and did not wait
    assert await worker < 0.05
    # nothing of the profile's held until the profiled process was ready, ...
    ready_at = min(t for t, _, ready, _, _ in samples if ready)
    assert ready_at - started > NCU_START_S
    assert [w for w, _ in held] == [
        "shared taken", "shared given back", "exclusive taken", "exclusive given back",
    ]  # fmt: skip
    assert seen["shared taken"] == (True, False, False)
    # ... the GPU to itself only once it had warmed up, and given back once the call was done
    assert seen["shared given back"] == (True, True, False)
    assert seen["exclusive taken"] == (True, True, False)
    assert seen["exclusive given back"] == (True, True, True)
    # while the profiler started, the arbiter was free but for the other worker's timing
    times = dict(held)
    before = [holders for t, holders, *_ in samples if t < times["shared taken"]]
    assert (0, False) in before and all(h in ((0, False), (0, True)) for h in before)
    assert outcome.gpu_s is not None and outcome.gpu_s < outcome.wall_s / 2
    # the summary is the captured report's
    assert outcome.summary is not None and outcome.summary.kernel == "rmsnorm_rows"


async def test_a_profiled_process_that_dies_at_load_holds_nothing(tmp_path, monkeypatch):
    _fake_ncu(tmp_path, monkeypatch)
    taken: list[str] = []

    @contextlib.asynccontextmanager
    async def hold():
        taken.append("held")
        yield

    source = "import no_such_module_here\n@triton.jit\ndef _rmsnorm_rows(x):\n    pass\n"
    outcome = await profile_candidate_async(
        "rmsnorm", source, tmp_path / "p", "5", timeout_s=120, shared=hold, exclusive=hold
    )
    assert outcome.status == "failed"
    assert "ended before it was ready" in outcome.reason
    assert taken == []
