"""LayerNorm over the last dimension with weight and bias (eps 1e-5); one row per
program, read in chunks of R columns: a pass for the mean, one for the variance, one
to write.

The start is deliberately mistuned (tiny chunks, one warp): the tuner's layernorm
workspace."""

import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm(X, W, B, Y, n_cols, stride, eps, R: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride
    y_row = Y + row * stride
    acc = tl.zeros((R,), dtype=tl.float32)
    for start in range(0, n_cols, R):
        cols = start + tl.arange(0, R)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros((R,), dtype=tl.float32)
    for start in range(0, n_cols, R):
        cols = start + tl.arange(0, R)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, R):
        cols = start + tl.arange(0, R)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=ok)


def kernel(x, weight, bias):
    m, n = x.shape
    y = torch.empty_like(x)
    _layernorm[(m,)](x, weight, bias, y, n, x.stride(0), 1e-5, R=64, num_warps=1)
    return y
