#!/usr/bin/env python3
"""Does a TMA (tensor-descriptor) rmsnorm beat torch.compile at 32768x8192 bf16?

Each row of 8192 is viewed as a [32, 256] box, loaded and stored with one TMA operation;
variants: one row per program, and a persistent grid whose row loop Triton may pipeline.
Every variant is checked against the high-precision reference, then timed back to back
with torch.compile, round after round (as bench/head_to_head.py). Needs a Hopper GPU.

    PYTHONPATH=. python3 bench/archive/2026-11-30-rmsnorm-probes/rmsnorm_tma.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository (bench/archive/<dir>/ is three down)
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier.timing import GpuTimer  # noqa: E402

R, C = 32, 256  # a row of 8192 as one [R, C] box


@triton.jit
def _tma_row(xd, wd, yd, eps, N: tl.constexpr, R: tl.constexpr):
    row = tl.program_id(0)
    x = xd.load([row * R, 0]).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / N + eps)
    w = wd.load([0, 0]).to(tl.float32)
    yd.store([row * R, 0], (x * rstd * w).to(tl.bfloat16))


@triton.jit
def _tma_persistent(xd, wd, yd, M, eps, N: tl.constexpr, R: tl.constexpr, STAGES: tl.constexpr):
    w = wd.load([0, 0]).to(tl.float32)
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
        x = xd.load([row * R, 0]).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / N + eps)
        yd.store([row * R, 0], (x * rstd * w).to(tl.bfloat16))


def make(kind: str, warps: int, per_sm: int = 0, stages: int = 1):
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def kernel(x, weight):
        M, N = x.shape
        y = torch.empty_like(x)
        xd = TensorDescriptor.from_tensor(x.view(M * R, C), [R, C])
        yd = TensorDescriptor.from_tensor(y.view(M * R, C), [R, C])
        wd = TensorDescriptor.from_tensor(weight.view(R, C), [R, C])
        if kind == "row":
            _tma_row[(M,)](xd, wd, yd, 1e-6, N=N, R=R, num_warps=warps)
        else:
            _tma_persistent[(min(M, sms * per_sm),)](
                xd, wd, yd, M, 1e-6, N=N, R=R, STAGES=stages, num_warps=warps
            )
        return y

    return kernel


def main() -> int:
    spec = get_op("rmsnorm")
    shape = spec.gpu_shapes[0]
    assert shape.dims["N"] == R * C
    inputs = spec.make_inputs(shape, 0, "cuda")
    expected = spec.reference_hp(inputs)
    compiled = torch.compile(spec.reference, dynamic=False)
    timer = GpuTimer("cuda")
    variants = {f"row w{w}": make("row", w) for w in (4, 8, 16)}
    for w in (4, 8):
        for per_sm in (1, 2, 4):
            for stages in (1, 2, 3):
                variants[f"pers w{w} x{per_sm} s{stages}"] = make("pers", w, per_sm, stages)
    rows = []
    for name, fn in variants.items():
        try:
            out = fn(inputs["x"], inputs["weight"])
            torch.cuda.synchronize()
        except Exception as exc:
            print(f"{name}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        bad = spec.compare([out], expected, inputs, shape)
        if bad is not None:
            print(f"{name}: WRONG {bad}")
            continue
        k_ms, c_ms = [], []
        for r in range(11):
            pair = [
                ("k", lambda fn=fn: fn(inputs["x"], inputs["weight"])),
                ("c", lambda: compiled(dict(inputs))),
            ]
            for tag, f in pair if r % 2 == 0 else pair[::-1]:
                (k_ms if tag == "k" else c_ms).append(timer.time(f, 20.0).median_ms)
        won = sum(k < c for k, c in zip(k_ms, c_ms, strict=True))
        ratio = statistics.median(k / c for k, c in zip(k_ms, c_ms, strict=True))
        rows.append((name, statistics.median(k_ms), statistics.median(c_ms), ratio, won))
        print(f"{name}: {rows[-1][1]:.4f} ms vs torch.compile {rows[-1][2]:.4f}: "
              f"{ratio:.4f}, won {won}/11", flush=True)  # fmt: skip
    print("\n| variant | kernel ms | torch.compile ms | ratio | rounds won |")
    print("|---|---|---|---|---|")
    for name, k, c, ratio, won in sorted(rows, key=lambda r: r[3]):
        print(f"| {name} | {k:.4f} | {c:.4f} | {ratio:.4f} | {won}/11 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
