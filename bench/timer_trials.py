#!/usr/bin/env python3
"""The GPU timer's trials timed two ways, side by side (issue 25): the same number of
flushed trials of the same call, once with a GPU sleep before every trial (how the timer
hid each launch before 2026-12-03) and once as GpuTimer.plan_trials plans them now (one
lead sleep where a trial's flush and call keep the host ahead, else a sleep for what they
do not cover); and the L2 flush's size, against a flush twice the default.

    python3 bench/timer_trials.py [--ops rmsnorm softmax kv_quant int8_matmul attention]
                                  [--rounds 5] [--compiled rmsnorm] [--out DIR]

For each op's committed best (the best attempt of examples/h200-OP-search), its library
baselines and, for the ops named by --compiled, torch.compile of its reference, at every
GPU shape: the plan (the host's time to enqueue a trial, the flush, the probe, the
sleeps), then --rounds rounds alternating the two ways, each with the trial count of a
TARGET_MS (100 ms) timing, and per way the median of the round medians and the seconds
the GPU was held per trial. Then the candidate after flushes of 64, 128, 256 and 512 MB
(before each trial, with a sleep before each). The two ways must agree within the rounds'
spread; the flush sizes show how small a flush still leaves L2 cold.

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

FLUSH_MB = (64, 128, 256, 512)


def _timed(timer: Any, fn: Any, trials: int, sleep: int, lead: int) -> tuple[float, float]:
    """(median ms, host seconds per trial) of one _measure."""
    t0 = time.perf_counter()
    samples = timer._measure(fn, trials, sleep, lead)
    return statistics.median(samples), (time.perf_counter() - t0) / trials


def compare_ways(timer: Any, fn: Any, rounds: int) -> dict[str, Any]:
    from kernelladder.verifier import timing

    fn()
    timer._sync()
    plan = timer.plan_trials(fn)
    trials = int(
        min(timing.MAX_TRIALS, max(timing.MIN_TRIALS, timing.TARGET_MS / plan["per_trial_ms"]))
    )
    each_sleep = plan["lead_cycles"] // timing.LEAD_TRIALS  # the old per-trial sleep
    ways = {"each": (each_sleep, 0), "lead": (plan["sleep_cycles"], plan["lead_cycles"])}
    medians: dict[str, list[float]] = {w: [] for w in ways}
    held: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(rounds):
        for way in ("each", "lead") if r % 2 == 0 else ("lead", "each"):
            med, per = _timed(timer, fn, trials, *ways[way])
            medians[way].append(med)
            held[way].append(per)
    out = {
        "plan": plan,
        "trials": trials,
        "flush_ms": round(timer.flush_ms, 4),
    }
    for way in ways:
        out[way] = {
            "median_ms": statistics.median(medians[way]),
            "rounds_ms": [round(m, 5) for m in medians[way]],
            "held_ms_per_trial": round(1e3 * statistics.median(held[way]), 4),
        }
    spread = [abs(a / b - 1.0) for a, b in zip(medians["each"], medians["each"][1:], strict=False)]
    out["ratio_lead_over_each"] = out["lead"]["median_ms"] / out["each"]["median_ms"]
    out["each_round_spread"] = max(spread) if spread else 0.0
    out["held_ratio"] = out["lead"]["held_ms_per_trial"] / max(
        1e-9, out["each"]["held_ms_per_trial"]
    )
    return out


def flush_sizes(timer: Any, fn: Any, trials: int, sleep: int) -> dict[str, float]:
    import torch

    from kernelladder.verifier.integrity import TRUSTED

    kept = timer._flush_buf
    out = {}
    try:
        for rep in range(2):
            for mb in FLUSH_MB if rep == 0 else tuple(reversed(FLUSH_MB)):
                timer._flush_buf = TRUSTED.empty(mb << 20, dtype=torch.int8, device=timer.device)
                med, _ = _timed(timer, fn, trials, sleep, 0)
                out.setdefault(str(mb), []).append(med)
                timer._flush_buf = None
    finally:
        timer._flush_buf = kept
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ops_all = ("rmsnorm", "softmax", "kv_quant", "int8_matmul", "attention")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=list(ops_all), choices=ops_all)
    ap.add_argument("--rounds", type=int, default=5)
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
    from kernelladder.verifier import candidate as candidate_mod
    from kernelladder.verifier import fence
    from kernelladder.verifier.timing import GpuTimer

    fence.install_launch_counter()
    timer = GpuTimer("cuda")
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
                    r = compare_ways(timer, fn, args.rounds)
                except BaselineNotApplicable:
                    continue
                if name.startswith("#"):
                    r["flush_mb_ms"] = flush_sizes(
                        timer, fn, r["trials"], r["plan"]["lead_cycles"] // 4
                    )
                row = {"op": op, "shape": shape.label, "fn": name, **r}
                rows.append(row)
                keys = ("op", "shape", "fn", "trials", "ratio_lead_over_each", "held_ratio")
                print(json.dumps({k: row[k] for k in keys}), flush=True)
            del inputs, cand_args, fns
            torch.cuda.empty_cache()
    results["rows"] = rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "timer_trials.json").write_text(json.dumps(results, indent=1))
    print(f"\nL2 {results['l2_bytes'] / 2**20:.0f} MiB; flush {timer.flush_ms:.4f} ms (256 MiB)")
    print(f"{'op':11} {'shape':24} {'fn':14} {'trials':>6} {'enq us':>7} {'each ms':>9} {'lead/each':>9} "
          f"{'spread':>7} {'held us each':>12} {'lead':>6} {'flush 64/128/512 vs 256':>24}")  # fmt: skip
    for r in rows:
        fl = r.get("flush_mb_ms") or {}
        flush = ""
        if fl:
            flush = "/".join(f"{fl[str(mb)] / fl['256']:.3f}" for mb in (64, 128, 512))
        print(
            f"{r['op']:11} {r['shape'][:24]:24} {r['fn'][:14]:14} {r['trials']:6d} "
            f"{1e3 * r['plan']['enqueue_ms']:7.1f} {r['each']['median_ms']:9.4f} "
            f"{r['ratio_lead_over_each']:9.4f} {r['each_round_spread']:7.4f} "
            f"{1e3 * r['each']['held_ms_per_trial']:12.1f} {r['held_ratio']:6.2f} {flush:>24}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
