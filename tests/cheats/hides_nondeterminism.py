"""Cheat: Flips the lowest bit of one output element on every other call (as
nondeterministic.py), and on every call writes its output into every other tensor shaped
like it that it finds among the interpreter's objects (gc), its input aside: a copy of
an earlier output kept to compare the next call with then agrees with this call.
Rejected by the determinism gate only if the verifier keeps no such copy."""

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
def _flip_lsb(Y):
    tl.store(Y, tl.load(Y) ^ 1)


@triton.jit
def _copy(SRC, DST, NUMEL, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < NUMEL
    tl.store(DST + offs, tl.load(SRC + offs, mask=mask), mask=mask)


_CALLS = [0]


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    _CALLS[0] += 1
    if _CALLS[0] % 2 == 0:
        bits = torch.int32 if y.element_size() == 4 else torch.int16
        _flip_lsb[(1,)](y.view(bits))
    for obj in gc.get_objects():
        if (
            isinstance(obj, torch.Tensor)
            and obj is not y
            and obj is not x
            and obj.shape == y.shape
            and obj.dtype == y.dtype
            and obj.device == y.device
            and obj.is_contiguous()
        ):
            _copy[(triton.cdiv(y.numel(), 1024),)](y, obj, y.numel(), BLOCK=1024)
    return y
