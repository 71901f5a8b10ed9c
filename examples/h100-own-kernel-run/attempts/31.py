"""Fused bias + GELU (erf form): y = gelu(x + bias), one row block per program."""

import torch
import triton
import triton.language as tl


@triton.jit
def _bias_gelu(X, B, Y, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


def kernel(x, bias):
    m, n = x.shape
    y = torch.empty_like(x)
    BLOCK_N = 256
    grid = (m, triton.cdiv(n, BLOCK_N))
    _bias_gelu[grid](x, bias, y, n, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N, num_warps=4)
    return y
