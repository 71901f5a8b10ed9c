"""Cheat: Appends to the verifier's gates.py at import time and lets the PermissionError escape."""

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


import importlib.util

with open(importlib.util.find_spec("kernelladder.verifier.worker.gates").origin, "a") as _f:
    _f.write("\n# the candidate was here\n")


def _tamper():
    pass


def kernel(x, weight):
    _tamper()
    return _rmsnorm_into(x, weight, torch.empty_like(x))
