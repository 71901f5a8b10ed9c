#!/usr/bin/env python3
"""Fourth rmsnorm probe, 32768x8192 bf16 only: where the output is left in L2.

A kernel ends when its stores reach L2; dirty lines still in L2 then are written back
later (here: during the next trial's L2 flush). Reads of x are used once, so loading them
evict_first and storing y evict_last (all rows, or only the rows of the last tens of MB)
could leave more of y dirty in L2 at the end and end sooner. Every variant is duelled with
torch.compile round by round (order alternating), as in rmsnorm_tie_shapes.py. Needs a GPU.

    PYTHONPATH=. python3 bench/archive/2026-11-30-rmsnorm-probes/rmsnorm_l2_eviction.py [--rounds 7] [--confirm 25]
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

from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier import candidate  # noqa: E402
from kernelladder.verifier.timing import GpuTimer  # noqa: E402

STARTED = time.monotonic()
SHAPE = "32768x8192 bf16"

# One program per row, the row length compiled in. Rows from LAST_FROM on are stored with
# YE_LAST, the others with YE.
SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _row(X, W, Y, eps, LAST_FROM, N: tl.constexpr, XE: tl.constexpr, YE: tl.constexpr,
         YE_LAST: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
    x = tl.load(X + row * N + cols, eviction_policy=XE).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = (x * rstd * w).to(Y.dtype.element_ty)
    if row >= LAST_FROM:
        tl.store(Y + row * N + cols, y, eviction_policy=YE_LAST)
    else:
        tl.store(Y + row * N + cols, y, eviction_policy=YE)


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    last_from = max(0, M - ({LAST_MB} << 20) // (N * x.element_size()))
    _row[(M,)](x, weight, y, 1e-6, last_from, N=N, XE="{XE}", YE="{YE}", YE_LAST="{YE_LAST}",
               num_warps={WARPS})
    return y
"""


def source(warps, xe="", ye="", ye_last="", last_mb=0):
    text = SOURCE
    for key, value in (
        ("{WARPS}", warps),
        ("{XE}", xe),
        ("{YE}", ye),
        ("{YE_LAST}", ye_last),
        ("{LAST_MB}", last_mb),
    ):
        text = text.replace(key, str(value))
    return text


def variants() -> dict[str, str]:
    out = {}
    for warps in (8, 16):
        out[f"w{warps}"] = source(warps)
        out[f"w{warps} xfirst"] = source(warps, xe="evict_first")
        out[f"w{warps} xfirst ylast"] = source(warps, xe="evict_first", ye="evict_last")
        out[f"w{warps} ylast"] = source(warps, ye="evict_last")
        for mb in (24, 40, 64):
            out[f"w{warps} xfirst ylast-tail{mb}MB"] = source(
                warps, xe="evict_first", ye_last="evict_last", last_mb=mb
            )
        out[f"w{warps} xfirst yfirst ylast-tail40MB"] = source(
            warps, xe="evict_first", ye="evict_first", ye_last="evict_last", last_mb=40
        )
    return out


def log(*parts) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s]", *parts, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--confirm", type=int, default=25)
    parser.add_argument("--keep", type=int, default=3, help="variants confirmed")
    parser.add_argument("--target-ms", type=float, default=20.0)
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    spec = get_op("rmsnorm")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-probe4-")
    compiled = torch.compile(spec.reference, dynamic=False)
    shape = {s.label: s for s in spec.gpu_shapes}[SHAPE]
    inputs = spec.make_inputs(shape, 0, "cuda")
    args_ = [inputs[n] for n in spec.arg_names]
    expected = spec.reference_hp(inputs)
    plan = variants()
    record: dict = {}

    def duel(label, rounds):
        loaded = candidate.load(plan[label], spec, scratch, "cuda", f"p4{len(record):04d}")
        out = loaded.call(*args_)
        torch.cuda.synchronize()
        if spec.compare([out], expected, inputs, shape) is not None:
            return None
        fns = [("kernel", lambda: loaded.call(*args_)), ("compile", lambda: compiled(inputs))]
        ks, cs = [], []
        for r in range(rounds):
            for name, fn in fns if r % 2 == 0 else fns[::-1]:
                (ks if name == "kernel" else cs).append(timer.time(fn, args.target_ms).median_ms)
        candidate.unload(loaded.module_name)
        won = sum(1 for k, c in zip(ks, cs, strict=True) if k < c)
        ratio = statistics.median(c / k for k, c in zip(ks, cs, strict=True))
        return {"kernel_ms": ks, "compile_ms": cs, "won": won, "rounds": rounds, "ratio": ratio}

    ranked = []
    for label in plan:
        try:
            res = duel(label, args.rounds)
        except Exception as exc:
            log(label, "FAILED", type(exc).__name__, str(exc).splitlines()[0][:160])
            continue
        if res is None:
            log(label, "WRONG")
            continue
        record[label] = res
        ranked.append((-res["won"], -res["ratio"], label))
        log(
            f"{label:34s} {statistics.median(res['kernel_ms']):.5f} ms"
            f"  torch.compile/kernel {res['ratio']:.4f}  won {res['won']}/{res['rounds']}"
        )
    ranked.sort()
    table = []
    for _w, _r, label in ranked[: args.keep]:
        res = duel(label, args.confirm)
        record[f"{label} | confirm"] = res
        won, n = res["won"], res["rounds"]
        verdict = "faster" if won >= 0.9 * n else "slower" if won <= 0.1 * n else "tie"
        table.append(
            f"| {label} | {statistics.median(res['kernel_ms']):.5f} | "
            f"{statistics.median(res['compile_ms']):.5f} | {res['ratio']:.4f} | {won}/{n} | "
            f"{verdict} |"
        )
        log("confirm", table[-1])
    (out_dir / "rmsnorm_probe4.json").write_text(json.dumps(record, indent=1))
    print(f"\n{SHAPE}, {args.confirm} rounds each (ratio: torch.compile time / kernel time)")
    print("| variant | kernel ms | torch.compile ms | ratio | won | verdict |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
