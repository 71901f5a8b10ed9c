#!/usr/bin/env python3
"""What a worker's first speed stage costs: one committed rmsnorm candidate verified
in a fresh process (pipelined, in-process), the seconds in the rates, the reference's
and the baselines' timings (torch.compile's compile included) and the rounds.
`--warm-inductor`: import torch.compile's compiler first (timed), off any GPU work.

    PYTHONPATH=. python3 bench/archive/2026-12-01-verify-breakdown/first_speed_stage.py [--warm-inductor]
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

T0 = time.perf_counter()
import torch  # noqa: E402

from kernelladder.ops import registry  # noqa: E402
from kernelladder.verifier import fence, gates, timing  # noqa: E402
from kernelladder.verifier.gates import Verifier, VerifyOptions, environment_info  # noqa: E402

SPENT: dict[str, float] = collections.defaultdict(float)
CALLS: list[tuple[float, str]] = []  # each timer.time call: (seconds, who)


def wrap(owner, name, label):
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - t0

    setattr(owner, name, timed)


def wrap_timer() -> None:
    """Each GpuTimer.time call's seconds: torch.compile's first call (its compile and
    inductor's autotuning) shows as the long ones."""
    original = timing.GpuTimer.time

    def timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, fn, *args, **kwargs)
        finally:
            CALLS.append((time.perf_counter() - t0, getattr(fn, "__qualname__", "?")))

    timing.GpuTimer.time = timed


def main() -> None:
    print(f"imports {time.perf_counter() - T0:.2f}s", flush=True)
    if "--warm-inductor" in sys.argv:
        t0 = time.perf_counter()
        from kernelladder.verifier import selftest

        print("  ", selftest.warm_compilers("cuda"))
        print(f"warm inductor {time.perf_counter() - t0:.2f}s", flush=True)
    registry.builtin_ops()
    torch.cuda.init()
    fence.install_launch_counter()
    wrap(timing, "_measure_rates", "rates")
    wrap(gates.Verifier, "reference_timing", "reference_timing")
    wrap(gates.Verifier, "baseline_ms", "baseline_ms")
    wrap(gates._Run, "_paired", "paired")
    wrap(gates._Run, "_compile_ahead", "compile_ahead")
    wrap_timer()
    t0 = time.perf_counter()
    verifier = Verifier("cuda", tempfile.mkdtemp(), environment_info("cuda"))
    print(f"verifier {time.perf_counter() - t0:.2f}s", flush=True)
    run = ROOT / "examples" / "h200-rmsnorm-standing"
    for n in (1, 2):
        SPENT.clear()
        CALLS.clear()
        source = (run / "attempts" / f"{n}.py").read_text()
        t0 = time.perf_counter()
        v = verifier.verify(
            VerifyOptions(
                op="rmsnorm", source=source, device="cuda", min_speedup=0.0, pipeline=True
            ),
            None,
            lambda name, gpu: None,
        ).verdict
        print(f"#{n} {v.verdict} {time.perf_counter() - t0:.2f}s stages {v.stages}", flush=True)
        print("   " + ", ".join(f"{k} {s:.2f}" for k, s in sorted(SPENT.items())), flush=True)
        total = sum(s for s, _ in CALLS)
        print(f"   timer.time: {len(CALLS)} calls, {total:.2f}s; longest:", flush=True)
        for s, who in sorted(CALLS, reverse=True)[:8]:
            print(f"     {s:.3f}s {who}", flush=True)


if __name__ == "__main__":
    main()
