"""Row softmax, online: one row per program, read in chunks of C columns; the first
pass keeps a running max and sum, the second writes exp(x - max) / sum.

The start is deliberately mistuned (tiny chunks, sixteen warps for them): the tuner's
softmax workspace."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(X, Y, n_cols, stride, C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride
    y_row = Y + row * stride
    m = tl.full((C,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((C,), dtype=tl.float32)
    for start in range(0, n_cols, C):
        cols = start + tl.arange(0, C)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, x)
        s = s * tl.exp(m - new_m) + tl.exp(x - new_m)
        s = tl.where(new_m == float("-inf"), 0.0, s)
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    for start in range(0, n_cols, C):
        cols = start + tl.arange(0, C)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - row_max) / total).to(Y.dtype.element_ty), mask=ok)


def kernel(x):
    m, n = x.shape
    y = torch.empty_like(x)
    _softmax[(m,)](x, y, n, x.stride(0), C=32, num_warps=16)
    return y
