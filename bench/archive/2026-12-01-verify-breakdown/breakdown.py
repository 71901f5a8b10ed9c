#!/usr/bin/env python3
"""Where a warm pipelined rmsnorm verification spends its GPU-held time, without cProfile:
the committed candidates verified in-process (the worker's Verifier, pipelined, a stage
callback that grants at once), the seconds per stage, and inside them the seconds spent
in the functions that matter (wrapped with perf_counter before any integrity snapshot).
Then the timer alone: the wall time of a 10 ms paired-round timing at the tiny and the
largest shape, and a CPU against a device draw of the 777x5120 inputs.

    PYTHONPATH=. python3 bench/archive/2026-12-01-verify-breakdown/breakdown.py
"""

from __future__ import annotations

import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.ops import _common, registry  # noqa: E402
from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier import (  # noqa: E402
    fence,
    gates,
    integrity,
    poison,
)
from kernelladder.verifier.gates import Verifier, VerifyOptions, environment_info  # noqa: E402

RUN = ROOT / "examples" / "h200-rmsnorm-standing"
SPENT: dict[str, float] = collections.defaultdict(float)
COUNT: dict[str, int] = collections.defaultdict(int)


def wrap(owner, name, label):
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - t0
            COUNT[label] += 1

    setattr(owner, name, timed)


def main() -> None:
    registry.builtin_ops()
    torch.cuda.init()
    fence.install_launch_counter()
    spec = get_op("rmsnorm")
    cls = type(spec)
    for name in ("make_inputs", "reference_hp", "compare"):
        wrap(cls, name, f"spec.{name}")
    wrap(poison, "poison_before_call", "poison")
    wrap(integrity, "altered", "integrity.altered")
    wrap(integrity, "take", "integrity.take")
    run_cls = gates._Run
    for name in (
        "_checked_call",
        "_side_work",
        "_anti_cheat_after_call",
        "_paired",
        "_check_timed_calls",
        "_trials",
        "_speed_gate",
    ):
        wrap(run_cls, name, f"run.{name}")
    from kernelladder.verifier import timing

    wrap(timing.GpuTimer, "time", "timer.time")
    wrap(timing.GpuTimer, "_measure", "timer._measure")
    scratch = tempfile.mkdtemp()
    verifier = Verifier("cuda", scratch, environment_info("cuda"))
    rows = []
    for n in range(1, 15):
        source = (RUN / "attempts" / f"{n}.py").read_text()
        marks: list[tuple[str, float]] = []

        def stage(name: str, gpu: str, marks: list = marks) -> None:
            marks.append((name, time.perf_counter()))

        SPENT.clear()
        COUNT.clear()
        t0 = time.perf_counter()
        outcome = verifier.verify(
            VerifyOptions(
                op="rmsnorm", source=source, device="cuda", min_speedup=0.0, pipeline=True
            ),
            None,
            stage,
        )
        total = time.perf_counter() - t0
        v = outcome.verdict
        print(f"== #{n} {v.verdict} {v.gate} {total:.2f}s stages {v.stages}", flush=True)
        print(
            "   " + ", ".join(f"{k} {SPENT[k]:.3f}/{COUNT[k]}" for k in sorted(SPENT)), flush=True
        )
        if n > 2:
            rows.append((dict(v.stages), dict(SPENT)))
    print("\nmedians over", len(rows), "warm attempts:")
    for key in sorted({k for s, _ in rows for k in s}):
        print(f"  stage {key}: {statistics.median(s.get(key, 0.0) for s, _ in rows):.3f}")
    for key in sorted({k for _, f in rows for k in f}):
        print(f"  {key}: {statistics.median(f.get(key, 0.0) for _, f in rows):.3f}")

    # the timer alone
    cand_src = (RUN / "attempts" / "1.py").read_text()
    path = Path(scratch) / "cand_probe.py"
    path.write_text(cand_src)
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("cand_probe", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    timer = verifier.timer()
    for shape in spec.gpu_shapes:
        inputs = spec.make_inputs(shape, 0, "cuda")
        args = [inputs[k] for k in spec.arg_names]
        fn = lambda args=args: mod.kernel(*args)  # noqa: E731
        fn()
        walls, trials = [], []
        for _ in range(14):
            t0 = time.perf_counter()
            t = timer.time(fn, 10.0)
            walls.append((time.perf_counter() - t0) * 1e3)
            trials.append(t.trials)
        print(
            f"timer.time(10 ms) at {shape.label}: wall median {statistics.median(walls):.1f} ms,"
            f" trials {statistics.median(trials)}, median {t.median_ms:.4f} ms",
            flush=True,
        )
    shape = next(s for s in spec.gpu_shapes if s.label.startswith("777"))
    for threshold in (1 << 22, 1 << 16):
        _common.DEVICE_DRAW_MIN_NUMEL = threshold
        walls = []
        for seed in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            spec.make_inputs(shape, seed, "cuda")
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
        print(
            f"make_inputs {shape.label}, device draws from {threshold} elements:"
            f" {statistics.median(walls):.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
