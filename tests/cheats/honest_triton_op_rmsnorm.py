"""Cheat: None: a correct rmsnorm defined with torch.library.triton_op, its kernel launched
through wrap_triton (the form torch.compile can trace into). It must pass."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def _rms_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)


@triton_op("kl_user_triton::rmsnorm", mutates_args={})
def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty_like(x)
    wrap_triton(_rms_rows)[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y


def kernel(x, weight):
    return rmsnorm(x, weight)
