"""Cheat: A wrong kernel (every output halved) that finds the verifier's high-precision
reference among the interpreter's objects (gc) and writes its own output into it, and
does the same to any saved copy of its inputs: rejected by the correctness gate."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import gc

import torch
import triton
import triton.language as tl


@triton.jit
def _half_rms_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (0.5 * x * inv * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _copy_into(SRC, DST, NUMEL, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < NUMEL
    tl.store(DST + offs, tl.load(SRC + offs, mask=mask).to(DST.dtype.element_ty), mask=mask)


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _half_rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    for obj in gc.get_objects():
        if (
            isinstance(obj, torch.Tensor)
            and obj is not y
            and obj.dtype == torch.float64
            and obj.shape == y.shape
            and obj.device == y.device
        ):
            # the reference now says what this kernel returned (a Triton copy: the fence
            # allows a kernel's stores, not torch's dtype casts)
            numel = y.numel()
            _copy_into[(triton.cdiv(numel, 1024),)](y, obj, numel, BLOCK=1024)
    return y
