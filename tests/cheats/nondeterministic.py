"""Cheat: Flips the lowest bit of one element on every other call (still within tolerance): rejected by the determinism gate."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

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


def _rmsnorm_into(x, weight, y, rows=None):
    m, n = x.shape
    grid = (m if rows is None else rows,)
    _rms_rows[grid](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y


_CALLS = [0]


@triton.jit
def _flip_lsb(Y):
    tl.store(Y, tl.load(Y) ^ 1)


def kernel(x, weight):
    y = _rmsnorm_into(x, weight, torch.empty_like(x))
    _CALLS[0] += 1
    if _CALLS[0] % 2 == 0:
        bits = torch.int32 if y.element_size() == 4 else torch.int16
        _flip_lsb[(1,)](y.view(bits))
    return y
