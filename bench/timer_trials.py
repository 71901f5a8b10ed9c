#!/usr/bin/env python3
"""The GPU timer's trials timed several ways, side by side (issue 25): the same number of
flushed trials of the same call, with the timer's L2 flush and its quiet gap before each
trial varied, against the way it timed until 2026-12-03 (a 256 MiB flush and a GPU sleep
of twice the host's enqueue time and 20 us before every trial). A way that gives every
call the times that one gives, as steadily, holds the GPU for less.

    python3 bench/timer_trials.py [--ops rmsnorm softmax kv_quant int8_matmul attention]
                                  [--rounds 6] [--compiled rmsnorm] [--out DIR]

The ways (VARIANTS): the flush of 256 MiB, twice the L2 (timing.flush_bytes_for) or
64 MiB; the gap before each trial the sleep that hides one launch, or a fixed 40, 20 or
10 us after one lead sleep (GpuTimer's gap_ms). For each op's committed best (the best
attempt of examples/h100-OP-search), its library baselines and, for the ops named by
--compiled, torch.compile of its reference, at every GPU shape: --rounds rounds of every
way, the order rotated each round (each way follows each other), each with the trial
count the timer gives a TARGET_MS timing; per way the median of the round medians over
the old way's, the largest deviation of one round's median from that, and the
microseconds the GPU was held per trial.

Writes timer_trials.json under --out (default $OUT, else ./timer-trials-out) and prints a
short table last. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

MIB = 1 << 20
VARIANTS = {  # name: (flush bytes, or None for twice the L2; gap ms, None: the old sleep)
    "old": (256 * MIB, None),
    "2xL2": (None, None),
    "64MiB": (64 * MIB, None),
    "2xL2 gap40": (None, 0.04),
    "2xL2 gap20": (None, 0.02),
    "2xL2 gap10": (None, 0.01),
}


def compare_ways(timers: dict[str, Any], fn: Any, rounds: int) -> dict[str, Any]:
    from kernelladder.verifier.worker import timing

    fn()
    timers["old"]._sync()
    plans = {name: t.plan_trials(fn) for name, t in timers.items()}
    per_trial = plans["old"]["per_trial_ms"]
    trials = int(min(timing.MAX_TRIALS, max(timing.MIN_TRIALS, timing.TARGET_MS / per_trial)))
    names = list(timers)
    medians: dict[str, list[float]] = {n: [] for n in names}
    held: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            plan = plans[name]
            t0 = time.perf_counter()
            samples = timers[name]._measure(fn, trials, plan["sleep_cycles"], plan["lead_cycles"])
            held[name].append((time.perf_counter() - t0) / trials)
            medians[name].append(statistics.median(samples))
    ref = statistics.median(medians["old"])
    out: dict[str, Any] = {"trials": trials, "enqueue_ms": plans["old"]["enqueue_ms"], "ways": {}}
    for name in names:
        med = statistics.median(medians[name])
        out["ways"][name] = {
            "ratio": med / ref,
            "worst_round": max(abs(m / med - 1.0) for m in medians[name]),
            "held_us_per_trial": round(1e6 * statistics.median(held[name]), 2),
            "rounds_ms": [round(m, 5) for m in medians[name]],
            "plan": plans[name],
        }
    return out


def main() -> int:
    ops_all = ("rmsnorm", "softmax", "kv_quant", "int8_matmul", "attention")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=list(ops_all), choices=ops_all)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--compiled", nargs="*", default=["rmsnorm"], choices=ops_all)
    ap.add_argument("--out", default=os.environ.get("OUT") or "timer-trials-out")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("timer_trials: needs a GPU (torch.cuda.is_available() is False)")
        return 2
    from speed_stage import best_attempt, example_run

    from kernelladder.ops.registry import op_from_wire
    from kernelladder.ops.spec import BaselineNotApplicable
    from kernelladder.verifier.worker import candidate as candidate_mod
    from kernelladder.verifier.worker import fence
    from kernelladder.verifier.worker.timing import GpuTimer

    fence.install_launch_counter()
    timers = {
        name: GpuTimer("cuda", flush_bytes=flush, gap_ms=gap)
        for name, (flush, gap) in VARIANTS.items()
    }
    scratch = tempfile.mkdtemp(prefix="kl-timer-trials-")
    results: dict[str, Any] = {"l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size}
    rows = []
    for op in args.ops:
        spec = op_from_wire(op)
        run = example_run(op)
        n = best_attempt(run)
        loaded = candidate_mod.load(
            (run / "attempts" / f"{n}.py").read_text(), spec, scratch, "cuda", f"{op}_{n}"
        )
        compiled = torch.compile(spec.reference, dynamic=False) if op in args.compiled else None
        for shape in spec.shapes_for("cuda"):
            inputs = spec.make_inputs(shape, 0, "cuda")
            cand_args = [inputs[k] for k in spec.arg_names]
            fns: dict[str, Any] = {f"#{n}": lambda a=cand_args, c=loaded: c.call(*a)}
            for name, fn in spec.library_baselines().items():
                fns[name] = lambda fn=fn, i=inputs: fn(i)
            if compiled is not None:
                fns["torch.compile"] = lambda i=inputs, c=compiled: c(dict(i))
            for name, fn in fns.items():
                try:
                    r = compare_ways(timers, fn, args.rounds)
                except BaselineNotApplicable:
                    continue
                row = {"op": op, "shape": shape.label, "fn": name, **r}
                rows.append(row)
                ratios = {w: round(v["ratio"], 4) for w, v in r["ways"].items()}
                print(
                    json.dumps({"op": op, "shape": shape.label, "fn": name, **ratios}), flush=True
                )
            del inputs, cand_args, fns
            torch.cuda.empty_cache()
    results["rows"] = rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "timer_trials.json").write_text(json.dumps(results, indent=1))
    flushes = {
        n: f"{t.flush_bytes / MIB:.0f} MiB {t.flush_ms * 1e3:.1f} us" for n, t in timers.items()
    }
    print(f"\nL2 {results['l2_bytes'] / MIB:.0f} MiB; flushes {flushes}")
    ways = list(VARIANTS)[1:]
    head = " ".join(f"{w:>16}" for w in ways)
    print(f"{'op':11} {'shape':20} {'fn':13} {'trials':>6} {'old us':>7} {head}")
    print(
        f"{'':53} (each: time over old's, worst round off its median, GPU held per trial / old's)"
    )
    worst: dict[str, float] = {w: 0.0 for w in ways}
    for r in rows:
        old = r["ways"]["old"]
        cells = []
        for w in ways:
            v = r["ways"][w]
            worst[w] = max(worst[w], abs(v["ratio"] - 1.0))
            cells.append(
                f"{v['ratio']:.3f} {v['worst_round']:.3f} {v['held_us_per_trial'] / old['held_us_per_trial']:.2f}"
            )
        print(
            f"{r['op'][:11]:11} {r['shape'][:20]:20} {r['fn'][:13]:13} {r['trials']:6d} "
            f"{old['held_us_per_trial']:7.1f} " + " ".join(f"{c:>16}" for c in cells)
        )
    print(
        "largest |time over old - 1| per way: "
        + ", ".join(f"{w} {x:.3f}" for w, x in worst.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
