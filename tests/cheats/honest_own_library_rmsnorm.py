"""Cheat: None: a correct rmsnorm registered by hand in a torch.library.Library of its own
namespace (a schema defined, a kernel for the CPU and one for CUDA). It must pass."""

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


def _rmsnorm(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y


_lib = torch.library.Library("kl_user_lib", "DEF")
_lib.define("rmsnorm(Tensor x, Tensor weight) -> Tensor")
_lib.impl("rmsnorm", _rmsnorm, "CPU")
_lib.impl("rmsnorm", _rmsnorm, "CUDA")


def kernel(x, weight):
    return torch.ops.kl_user_lib.rmsnorm(x, weight)
