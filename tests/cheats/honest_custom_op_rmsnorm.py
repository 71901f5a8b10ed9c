"""Cheat: None: a correct rmsnorm whose Triton kernel is wrapped as an operator of its own
namespace with torch.library.custom_op (with a fake for torch.compile), as people do to
make a kernel work with torch.compile. It must pass (an operator the candidate defines
is its own; what runs inside it is judged like the rest of the call)."""

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


@torch.library.custom_op("kl_user_norms::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y


@rmsnorm.register_fake
def _(x, weight):
    return torch.empty_like(x)


def kernel(x, weight):
    return rmsnorm(x, weight)
