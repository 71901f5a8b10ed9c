"""Cheat: honest for the first 63 calls; from then on (the last shape's rounds, as in
late_timing_cache.py) it does no work: it zeroes its input x, and every other tensor
shaped like x it finds among the interpreter's objects (gc: a copy of the inputs the
verifier might hold), and returns zeros, which rmsnorm of a zero input is. Rejected at
anti-cheat only if the timed calls' inputs are checked against inputs the candidate
could not reach (drawn again after the calls)."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import gc

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _zero(T, NUMEL, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(T + offs, tl.zeros([BLOCK], dtype=T.dtype.element_ty), mask=offs < NUMEL)


def _zero_all(t):
    _zero[(triton.cdiv(t.numel(), 1024),)](t, t.numel(), BLOCK=1024)


_CALLS = [0]


def kernel(x, weight):
    _CALLS[0] += 1
    m, n = x.shape
    y = torch.empty_like(x)
    if _CALLS[0] > 63:
        for obj in gc.get_objects():
            if (
                isinstance(obj, torch.Tensor)
                and obj is not y
                and obj.shape == x.shape
                and obj.dtype == x.dtype
                and obj.device == x.device
            ):
                _zero_all(obj)  # x itself and any copy of it
        _zero_all(y)
        return y
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y
