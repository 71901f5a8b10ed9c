#!/usr/bin/env python3
"""Second rmsnorm probe: variants of the one-row kernel that the template grid does not
yet hold (store hints, load cache modifiers, register caps, a constexpr-N two-pass), timed
with the verifier's timer on the largest shape, the best few then on every GPU shape.

    PYTHONPATH=. python3 bench/archive/2026-11-30-rmsnorm-probes/rmsnorm_one_row_variants.py
"""

from __future__ import annotations

import json
import os
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

ONE_ROW = """
import torch
import triton
import triton.language as tl


@triton.jit
def _row(X, W, Y, N, sxm, sym, eps, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    if EVEN:
        x = tl.load(X + row * sxm + cols, {XHINT}).to(tl.float32)
    else:
        x = tl.load(X + row * sxm + cols, mask=mask, other=0.0, {XHINT}).to(tl.float32)
    {WLOAD_EARLY}
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    {WLOAD_LATE}
    y = (x * rstd * w).to(Y.dtype.element_ty)
    if EVEN:
        tl.store(Y + row * sym + cols, y, {YHINT})
    else:
        tl.store(Y + row * sym + cols, y, mask=mask, {YHINT})


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    warps = max({MINW}, min({MAXW}, block // 128))
    _row[(M,)](x, weight, y, N, x.stride(0), y.stride(0), 1e-6, BLOCK=block, EVEN=block == N,
               num_warps=warps{EXTRA})
    return y
"""

W_EARLY = "w = tl.load(W + cols, mask=mask, other=0.0{WH}).to(tl.float32)"

TWO_PASS = """
import torch
import triton
import triton.language as tl


@triton.jit
def _two(X, W, Y, sxm, sym, eps, N: tl.constexpr, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in tl.range(0, N, CHUNK, num_stages=STAGES):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(X + row * sxm + cols, mask=cols < N, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    for start in tl.range(0, N, CHUNK, num_stages=STAGES):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(X + row * sxm + cols, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(Y + row * sym + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    chunk = min({CHUNK}, triton.next_power_of_2(N))
    _two[(M,)](x, weight, y, x.stride(0), y.stride(0), 1e-6, N=N, CHUNK=chunk, STAGES={STAGES},
               num_warps={WARPS})
    return y
"""


def one_row(xhint="", yhint="", wh="", late=False, minw=4, maxw=8, extra=""):
    w = W_EARLY.replace("{WH}", wh)
    return (
        ONE_ROW.replace("{XHINT}", xhint or "eviction_policy=''")
        .replace("{YHINT}", yhint or "cache_modifier=''")
        .replace("{WLOAD_EARLY}", "" if late else w)
        .replace("{WLOAD_LATE}", w if late else "")
        .replace("{MINW}", str(minw))
        .replace("{MAXW}", str(maxw))
        .replace("{EXTRA}", extra)
    )


def variants():
    el = "eviction_policy='evict_last'"
    out = {
        "control w8 xlast": one_row(el),
        "w8 xlast yfirst": one_row(el, "eviction_policy='evict_first'"),
        "w8 xlast ylast": one_row(el, "eviction_policy='evict_last'"),
        "w8 xlast y.cg": one_row(el, "cache_modifier='.cg'"),
        "w8 xlast y.wt": one_row(el, "cache_modifier='.wt'"),
        "w8 xlast.cg": one_row(el + ", cache_modifier='.cg'"),
        "w8 xlast.ca": one_row(el + ", cache_modifier='.ca'"),
        "w8 xlast wlast": one_row(el, wh=", eviction_policy='evict_last'"),
        "w8 xlast wlate": one_row(el, late=True),
        "w8 xlast wlate wlast": one_row(el, late=True, wh=", eviction_policy='evict_last'"),
        "w8 xlast maxnreg64": one_row(el, extra=", maxnreg=64"),
        "w8 xlast maxnreg96": one_row(el, extra=", maxnreg=96"),
        "w8 xlast maxnreg128": one_row(el, extra=", maxnreg=128"),
        "w4 xlast maxnreg128": one_row(el, minw=4, maxw=4, extra=", maxnreg=128"),
        "w16 xlast maxnreg40": one_row(el, minw=4, maxw=16, extra=", maxnreg=40"),
        "w16 xlast maxnreg64": one_row(el, minw=4, maxw=16, extra=", maxnreg=64"),
    }
    for chunk in (1024, 2048, 4096):
        for warps in (4, 8, 16):
            for stages in (1, 3):
                src = (
                    TWO_PASS.replace("{CHUNK}", str(chunk))
                    .replace("{WARPS}", str(warps))
                    .replace("{STAGES}", str(stages))
                )
                out[f"two constN c{chunk} w{warps} s{stages}"] = src
    return out


def log(*parts) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s]", *parts, flush=True)


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    spec = get_op("rmsnorm")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-probe2-")
    shapes = list(spec.gpu_shapes)
    inputs = {s.label: spec.make_inputs(s, 0, "cuda") for s in shapes}
    expected = {s.label: spec.reference_hp(inputs[s.label]) for s in shapes}
    compiled = torch.compile(spec.reference, dynamic=False)
    record = {}

    def run(label, src, shape_list):
        loaded = candidate.load(src, spec, scratch, "cuda", f"{abs(hash(label)):016x}")
        res = {}
        for s in shape_list:
            args_ = [inputs[s.label][n] for n in spec.arg_names]
            out = loaded.call(*args_)
            torch.cuda.synchronize()
            bad = spec.compare([out], expected[s.label], inputs[s.label], s)
            if bad is not None:
                res[s.label] = None
                continue
            res[s.label] = timer.time(lambda a=args_: loaded.call(*a)).median_ms
        return res

    big = shapes[0]
    base = {}
    for s in shapes:
        base[s.label] = timer.time(lambda s=s: compiled(dict(inputs[s.label]))).median_ms
    log("compile", base)
    ranked = []
    for label, src in variants().items():
        try:
            ms = run(label, src, [big])[big.label]
        except Exception as exc:
            log(label, "FAILED", type(exc).__name__, str(exc).splitlines()[0][:160])
            continue
        record[label] = {big.label: ms}
        if ms is None:
            log(label, "WRONG")
            continue
        ranked.append((ms, label))
        log(f"{label:30s} {ms:.4f} ms  vs compile {base[big.label] / ms:.4f}x")
    # control again: drift during the probe
    c2 = timer.time(lambda: compiled(dict(inputs[big.label]))).median_ms
    log("compile again", c2)
    ranked.sort()
    srcs = variants()
    print("\n| variant | " + " | ".join(s.label for s in shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    print("| torch.compile | " + " | ".join(f"{base[s.label]:.4f}" for s in shapes) + " |")
    for _ms, label in ranked[:6]:
        res = run(label, srcs[label], shapes)
        record[label] = res
        cells = [f"{res[s.label]:.4f}" if res[s.label] else "WRONG" for s in shapes]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    (out_dir / "rmsnorm_probe2.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
