#!/usr/bin/env python3
"""Third rmsnorm probe: only the two shapes where the search's kernels tie torch.compile
(32768x8192 bf16 and 1x1000 fp32), with variants the earlier probes did not hold: one or
two warps at the tiny shape (a reduction with no shared memory and no barrier), streaming
stores (.cs), and row orders other than program order at the large shape.

Every variant is timed against torch.compile round by round (order alternating), so the
verdict per variant comes from per-round wins, as in head_to_head.py. The few with the
most wins then get a longer confirmation. Needs a GPU.

    PYTHONPATH=. python3 bench/archive/2026-11-30-rmsnorm-probes/rmsnorm_tie_shapes.py [--rounds 7] [--confirm 25]
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

# One program per row (or ROWS rows), the row length compiled in; ORDER picks which row a
# program takes: 0 in order, 1 the reverse, 2 a stride through the rows (M a power of two
# and an odd stride visit every row once), 3 the two halves interleaved.
SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _row(X, W, Y, M, eps, N: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
         ORDER: tl.constexpr, XE: tl.constexpr, WE: tl.constexpr, YC: tl.constexpr,
         YE: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy=WE).to(tl.float32)
    for r in tl.static_range(ROWS):
        p = pid * ROWS + r
        if ORDER == 1:
            row = M - 1 - p
        elif ORDER == 2:
            row = (p * 40503) % M
        elif ORDER == 3:
            row = (p % 2) * (M // 2) + p // 2
        else:
            row = p
        if BLOCK == N:
            x = tl.load(X + row * N + cols, eviction_policy=XE).to(tl.float32)
        else:
            x = tl.load(X + row * N + cols, mask=mask, other=0.0, eviction_policy=XE).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        y = (x * rstd * w).to(Y.dtype.element_ty)
        if BLOCK == N:
            tl.store(Y + row * N + cols, y, cache_modifier=YC, eviction_policy=YE)
        else:
            tl.store(Y + row * N + cols, y, mask=mask, cache_modifier=YC, eviction_policy=YE)


def kernel(x, weight):
    M, N = x.shape
    x = x.contiguous()
    y = torch.empty_like(x)
    rows = {ROWS} if M % {ROWS} == 0 else 1
    _row[(M // rows,)](x, weight, y, M, 1e-6, N=N, BLOCK=triton.next_power_of_2(N), ROWS=rows,
                       ORDER={ORDER} if M & (M - 1) == 0 else 0, XE="{XE}", WE="{WE}",
                       YC="{YC}", YE="{YE}", num_warps={WARPS})
    return y
"""


def source(warps, rows=1, order=0, xe="evict_last", we="evict_last", yc="", ye=""):
    return (
        SOURCE.replace("{WARPS}", str(warps))
        .replace("{ROWS}", str(rows))
        .replace("{ORDER}", str(order))
        .replace("{XE}", xe)
        .replace("{WE}", we)
        .replace("{YC}", yc)
        .replace("{YE}", ye)
    )


def tiny_variants() -> dict[str, str]:
    out = {}
    for warps in (1, 2, 4, 8):
        out[f"w{warps}"] = source(warps)
        out[f"w{warps} nohint"] = source(warps, xe="", we="")
    out["w1 y.cs"] = source(1, yc=".cs")
    out["w2 y.cs"] = source(2, yc=".cs")
    return out


def big_variants() -> dict[str, str]:
    out = {}
    for warps in (4, 8, 16):
        out[f"w{warps}"] = source(warps)
        out[f"w{warps} y.cs"] = source(warps, yc=".cs")
        out[f"w{warps} yfirst"] = source(warps, ye="evict_first")
        out[f"w{warps} xfirst y.cs"] = source(warps, xe="evict_first", yc=".cs")
    for order in (1, 2, 3):
        out[f"w4 order{order}"] = source(4, order=order)
        out[f"w8 order{order}"] = source(8, order=order)
    out["w8 rows2"] = source(8, rows=2)
    out["w16 rows2"] = source(16, rows=2)
    out["w8 rows2 order3"] = source(8, rows=2, order=3)
    return out


def log(*parts) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s]", *parts, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--confirm", type=int, default=25)
    parser.add_argument("--keep", type=int, default=3, help="variants confirmed per shape")
    parser.add_argument("--target-ms", type=float, default=20.0)
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    spec = get_op("rmsnorm")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-probe3-")
    compiled = torch.compile(spec.reference, dynamic=False)
    shapes = {s.label: s for s in spec.gpu_shapes}
    plan = {"32768x8192 bf16": big_variants(), "tiny 1x1000 fp32": tiny_variants()}
    record: dict = {}
    table: list[str] = []

    def duel(label, src, shape, rounds):
        inputs = spec.make_inputs(shape, 0, "cuda")
        args_ = [inputs[n] for n in spec.arg_names]
        loaded = candidate.load(src, spec, scratch, "cuda", f"p3{abs(hash((label, rounds))):012x}")
        out = loaded.call(*args_)
        torch.cuda.synchronize()
        bad = spec.compare([out], spec.reference_hp(inputs), inputs, shape)
        if bad is not None:
            return None
        fns = [
            ("kernel", lambda: loaded.call(*args_)),
            ("compile", lambda: compiled(dict(inputs))),
        ]
        ks, cs = [], []
        for r in range(rounds):
            for name, fn in fns if r % 2 == 0 else fns[::-1]:
                ms = timer.time(fn, args.target_ms).median_ms
                (ks if name == "kernel" else cs).append(ms)
        candidate.unload(loaded.module_name)
        won = sum(1 for k, c in zip(ks, cs, strict=True) if k < c)
        ratio = statistics.median(k / c for k, c in zip(ks, cs, strict=True))
        return {"kernel_ms": ks, "compile_ms": cs, "won": won, "rounds": rounds, "ratio": ratio}

    for shape_label, variants in plan.items():
        shape = shapes[shape_label]
        ranked = []
        for label, src in variants.items():
            try:
                res = duel(label, src, shape, args.rounds)
            except Exception as exc:
                log(
                    shape_label, label, "FAILED", type(exc).__name__, str(exc).splitlines()[0][:160]
                )
                continue
            if res is None:
                log(shape_label, label, "WRONG")
                continue
            record[f"{shape_label} | {label}"] = res
            ranked.append((-res["won"], res["ratio"], label))
            log(
                f"{shape_label:18s} {label:22s} {statistics.median(res['kernel_ms']):.5f} ms"
                f"  ratio {res['ratio']:.4f}  won {res['won']}/{res['rounds']}"
            )
        ranked.sort()
        for _w, _r, label in ranked[: args.keep]:
            res = duel(label, variants[label], shape, args.confirm)
            record[f"{shape_label} | {label} | confirm"] = res
            verdict = (
                "faster"
                if res["won"] >= 0.9 * res["rounds"]
                else "slower"
                if res["won"] <= 0.1 * res["rounds"]
                else "tie"
            )
            table.append(
                f"| {shape_label} | {label} | {statistics.median(res['kernel_ms']):.5f} | "
                f"{statistics.median(res['compile_ms']):.5f} | {res['ratio']:.4f} | "
                f"{res['won']}/{res['rounds']} | {verdict} |"
            )
            log("confirm", table[-1])
    (out_dir / "rmsnorm_probe3.json").write_text(json.dumps(record, indent=1))
    print("\n| shape | variant | kernel ms | torch.compile ms | ratio | won | verdict |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
