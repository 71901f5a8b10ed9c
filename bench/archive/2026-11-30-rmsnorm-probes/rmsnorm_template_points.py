#!/usr/bin/env python3
"""Probe of rmsnorm kernel configurations on the GPU, timed with the verifier's timer.

Stage 1 times many template points on the largest shape only; stage 2 times the best few
on every GPU shape next to F.rms_norm and torch.compile; stage 3 looks at the tiny shape's
raw samples (how fine the event timer resolves a launch-bound kernel). Used to choose the
search's starting points; writes a JSON log to $OUT (or the current directory).

    PYTHONPATH=. python3 bench/archive/2026-11-30-rmsnorm-probes/rmsnorm_template_points.py [--budget S]
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

ROOT = Path(__file__).resolve().parents[3]  # the repository (bench/archive/<dir>/ is three down)
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.engine.proposers.templates import rmsnorm as tmpl  # noqa: E402
from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier import candidate  # noqa: E402
from kernelladder.verifier.timing import GpuTimer  # noqa: E402

STARTED = time.monotonic()


def log(*parts) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s]", *parts, flush=True)


def family(name):
    return next(f for f in tmpl.FAMILIES if f.name == name)


def points():
    """(label, family, params) of the probe's first stage."""
    out = []
    one = family("one-row-per-program")
    for warps in (4, 8, 16):
        for x_evict in ("", "evict_first", "evict_last"):
            for y_cache in ("", ".cs"):
                p = dict(one.start, MIN_WARPS=min(warps, 4), MAX_WARPS=warps, EPT=4)
                p.update(X_EVICT=x_evict, Y_CACHE=y_cache)
                if warps < 4:
                    continue
                out.append((f"one w{warps} x{x_evict or '-'} y{y_cache or '-'}", one, p))
    multi = family("multi-row")
    for rows in (2, 4, 8):
        for tile_max in (16384, 32768):
            for max_warps in (8, 16):
                p = dict(multi.start, ROWS=rows, TILE_MAX=tile_max, MAX_WARPS=max_warps, EPT=4)
                p.update(X_EVICT="evict_first")
                out.append((f"multi r{rows} t{tile_max} w{max_warps}", multi, p))
    pers = family("persistent")
    for pps in (1, 2, 4, 8):
        for prefetch in (False, True):
            for max_warps in (8, 16):
                p = dict(pers.start, PROGRAMS_PER_SM=pps, PREFETCH=prefetch, ROWS=1)
                p.update(MAX_WARPS=max_warps, EPT=4, X_EVICT="evict_first")
                out.append((f"pers pps{pps} pf{int(prefetch)} w{max_warps}", pers, p))
    two = family("two-pass")
    for chunk in (1024, 2048, 4096):
        for warps in (4, 8, 16):
            for stats in ("evict_last", ""):
                p = dict(two.start, CHUNK=chunk, MAX_BLOCK=1024, MAX_WARPS=warps, EPT=4)
                p.update(MIN_WARPS=min(warps, 4), STATS_EVICT=stats)
                out.append((f"two c{chunk} w{warps} s{stats or '-'}", two, p))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=240.0)
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    spec = get_op("rmsnorm")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-probe-")
    shapes = list(spec.gpu_shapes)
    inputs = {s.label: spec.make_inputs(s, 0, "cuda") for s in shapes}
    expected = {s.label: spec.reference_hp(inputs[s.label]) for s in shapes}
    record: dict = {"stage1": {}, "stage2": {}, "tiny": {}}

    def run_point(label, fam, params, shape_list):
        src = fam.render(params)
        loaded = candidate.load(src, spec, scratch, "cuda", f"{abs(hash(label)):016x}")
        res = {}
        for s in shape_list:
            inp = inputs[s.label]
            args_ = [inp[n] for n in spec.arg_names]
            out = loaded.call(*args_)
            torch.cuda.synchronize()
            bad = spec.compare([out], expected[s.label], inp, s)
            if bad is not None:
                res[s.label] = f"WRONG: {bad}"
                continue
            t = timer.time(lambda a=args_: loaded.call(*a))
            res[s.label] = {"ms": t.median_ms, "noise": t.noise}
        return res

    big = shapes[0]
    floor = timer.floor_ms(spec.bytes_moved(big), 0, "fp32")
    log("copy rate TB/s", timer.rates()["copy"] / 1e9, "floor ms", floor)
    # baselines first
    baselines = {}
    for name, fn in spec.library_baselines().items():
        baselines[name] = fn
    compiled = torch.compile(spec.reference, dynamic=False)
    baselines["torch.compile"] = lambda inp: compiled(dict(inp))
    base_ms = {}
    for s in shapes:
        for name, fn in baselines.items():
            t = timer.time(lambda fn=fn, inp=inputs[s.label]: fn(inp))
            base_ms[(s.label, name)] = t
            log(f"{s.label:18s} {name:14s} {t.median_ms:.4f} ms noise {t.noise:.1%}")
    record["baselines"] = {f"{k[0]}|{k[1]}": v.to_dict() for k, v in base_ms.items()}

    results = []
    for label, fam, params in points():
        if time.monotonic() - STARTED > args.budget * 0.6:
            log("stage 1 out of time")
            break
        try:
            res = run_point(label, fam, params, [big])
        except Exception as exc:  # a point that does not compile is reported, not fatal
            log(label, "FAILED", type(exc).__name__, str(exc)[:200])
            continue
        r = res[big.label]
        record["stage1"][label] = r
        if isinstance(r, dict):
            results.append((r["ms"], label, fam, params))
            log(f"{label:34s} {r['ms']:.4f} ms {floor / r['ms']:.1%} floor noise {r['noise']:.1%}")
        else:
            log(label, r)
    results.sort(key=lambda t: t[0])
    for _ms, label, fam, params in results[:8]:
        if time.monotonic() - STARTED > args.budget * 0.9:
            break
        res = run_point(label, fam, params, shapes)
        record["stage2"][label] = {"params": params, "family": fam.name, "shapes": res}
        cells = []
        for s in shapes:
            r = res[s.label]
            if not isinstance(r, dict):
                cells.append("WRONG")
                continue
            best_base = min(base_ms[(s.label, n)].median_ms for n in baselines)
            cells.append(f"{r['ms']:.4f}({best_base / r['ms']:.3f}x)")
        log(f"{label:34s}", " ".join(cells))
    # tiny shape: warps of one row per program
    one = family("one-row-per-program")
    for warps in (1, 2, 4, 8):
        params = dict(one.start, MIN_WARPS=warps, MAX_WARPS=warps, EPT=4, X_EVICT="")
        try:
            res = run_point(f"tiny one w{warps}", one, params, [shapes[3], shapes[2]])
        except Exception as exc:
            log("tiny", warps, "FAILED", type(exc).__name__, str(exc)[:200])
            continue
        record["tiny"][f"w{warps}"] = res
        log(f"tiny/tail one-row w{warps}", res)
    # tiny shape raw samples: the event timer's resolution at a launch-bound kernel
    tiny = shapes[3]
    inp = inputs[tiny.label]
    fn = baselines["torch.compile"]
    samples = timer._measure(lambda: fn(inp), 200, 100_000)
    record["tiny"]["compile_samples"] = samples
    distinct = sorted(set(round(x, 6) for x in samples))
    log("tiny compile samples: median", statistics.median(samples), "distinct", distinct[:20])
    (out_dir / "rmsnorm_probe.json").write_text(json.dumps(record, indent=1, default=str))
    print("\n| config | " + " | ".join(s.label for s in shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    print(
        "| best baseline | "
        + " | ".join(
            f"{min(base_ms[(s.label, n)].median_ms for n in baselines):.4f}" for s in shapes
        )
        + " |"
    )
    for label, entry in record["stage2"].items():
        cells = [
            f"{r['ms']:.4f}" if isinstance(r, dict) else "WRONG" for r in entry["shapes"].values()
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
