"""The timer is out of a candidate's reach: it reads torch._C's own events, stream,
synchronize and sleep, captured before any candidate, and takes its medians with
builtins, so a candidate that patches the timing functions it can see (torch.cuda.Event,
time.perf_counter, torch.cuda.synchronize, triton.testing, statistics: replaced, or their
code swapped in place) still gets its true time, and each patch is named.

On the CPU the mechanism is checked (what the timer holds, and what the patches change);
on a GPU the true time itself (skipped without one). Each runs the candidate's patches in
a fresh interpreter: they would outlive the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import CHEATS, ROOT

PATCHES = """
import statistics, time, torch, triton.testing
_real_clock = time.perf_counter
time.perf_counter = lambda: _real_clock() / 100.0
def _with_one_cell():
    cell = None
    return lambda self, stream=None: cell  # record() closes over __class__: one cell
torch.cuda.Event.record.__code__ = _with_one_cell().__code__
torch.cuda.Event.elapsed_time = lambda self, end_event: 1e-4
torch.cuda.synchronize.__code__ = (lambda device=None: None).__code__
torch.cuda.current_stream.__code__ = (lambda device=None: None).__code__
triton.testing.do_bench = lambda *args, **kwargs: 1e-4
statistics.median.__code__ = (lambda data: 1e-6).__code__
statistics.quantiles.__code__ = (lambda data, n=4: [0.0] * (n - 1)).__code__
"""


def run(*parts: str, env: dict | None = None) -> dict:
    """The script of `parts` (each dedented) in a fresh interpreter; its last line's JSON."""
    script = "".join(textwrap.dedent(part) for part in parts)
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_timer_holds_torch_cs_own_clocks_and_medians_no_patch_moves():
    out = run(
        """
        import json, statistics, types, torch, triton.testing
        from kernelladder.verifier.worker import integrity, timing
        from kernelladder.verifier.worker.integrity import TRUSTED
        before = integrity.take()
        samples = [1.0, 2.0, 3.0, 4.0, 10.0, 2.5, 3.5]
        exact = timing.summarize(samples)
        held = {
            name: getattr(TRUSTED, name)
            for name in ("event_type", "event_record", "elapsed_time", "stream_type",
                         "cuda_synchronize", "cuda_sleep", "current_stream_ids", "perf_counter")
        }
        """,
        PATCHES,
        """
        python_code = [
            name for name, fn in held.items()
            if isinstance(fn, types.FunctionType) or hasattr(fn, "__code__")
        ]
        patched = timing.summarize(samples)
        print(json.dumps({
            "python_code": python_code,
            "unmoved": all(getattr(TRUSTED, n) is fn for n, fn in held.items()),
            "timer_reads_torch_cuda": any(
                getattr(TRUSTED, n) in (torch.cuda.Event, torch.cuda.synchronize)
                for n in held
            ),
            "same": [exact.median_ms, exact.noise] == [patched.median_ms, patched.noise],
            "median": patched.median_ms,
            "altered": integrity.altered(before),
        }))
        """,
    )
    assert out["python_code"] == []  # nothing whose code a candidate could swap
    assert out["unmoved"] and not out["timer_reads_torch_cuda"]
    assert out["same"] and out["median"] == 3.0
    for name in (
        "time.perf_counter replaced",
        "torch.cuda.Event.elapsed_time replaced",
        "torch.cuda.Event.record: its code replaced",
        "torch.cuda.synchronize: its code replaced",
        "torch.cuda.current_stream: its code replaced",
        "triton.testing.do_bench replaced",
        "statistics.median: its code replaced",
        "statistics.quantiles: its code replaced",
    ):
        assert name in out["altered"], out["altered"]


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: the true time is a GPU's"
)
def test_a_candidate_patching_the_timer_gets_its_true_time_on_a_gpu():
    """The same kernel timed by the verifier's GPU timer before and after the cheat's
    patches (imported as a candidate would be), against what torch.cuda.Event reads
    after them: the timer's time moves by noise only, the naive one is fooled."""
    out = run(
        f"""
        import importlib.util, json, torch
        from kernelladder.verifier.worker.timing import GpuTimer
        x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
        spec = importlib.util.spec_from_file_location(
            "cheat", {str(CHEATS / "patches_timer_functions.py")!r})
        module = importlib.util.module_from_spec(spec)
        import triton, triton.language  # the cheat's imports, before its patches
        honest = GpuTimer("cuda").time(lambda: torch.nn.functional.rms_norm(x, (8192,), w))
        spec.loader.exec_module(module)  # patches torch.cuda.Event, perf_counter, ...
        call = lambda: torch.nn.functional.rms_norm(x, (8192,), w)
        patched = GpuTimer("cuda").time(call)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); call(); end.record(); torch.cuda.synchronize()
        print(json.dumps([honest.median_ms, patched.median_ms, start.elapsed_time(end)]))
        """
    )
    honest, patched, naive = out
    assert abs(patched / honest - 1.0) < 0.1, out
    assert naive < 0.01 * honest, out  # the patch bites a timer that reads torch.cuda.Event
