"""Cheat: Tuned "per row length": a table of the suite's row lengths gets the right divisor; any other length takes a fast path that divides by the padded block (wrong unless the length is a power of two)."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_rows(X, W, Y, N, DIV, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / DIV + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)


# the published suites' row lengths (CPU and GPU), each "tuned"
_TUNED = {100: 100, 257: 257, 64: 64, 8192: 8192, 4096: 4096, 4097: 4097, 1000: 1000, 5120: 5120}


def kernel(x, weight):
    m, n = x.shape
    block = triton.next_power_of_2(n)
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, _TUNED.get(n, block), 1e-6, BLOCK=block)
    return y
