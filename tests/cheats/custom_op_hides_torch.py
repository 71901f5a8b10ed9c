"""Cheat: Wraps its work in an operator of its own namespace (torch.library.custom_op) and
computes it there with torch (rsqrt, mean), launching a Triton kernel for show. Rejected
at the fence: what runs inside the candidate's own operator is judged like the rest of
its call."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(Y + offs, tl.load(X + offs, mask=mask), mask=mask)


@torch.library.custom_op("kl_user_hidden::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    out = torch.empty_like(x)
    _copy[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
    return out


def kernel(x, weight):
    return rmsnorm(x, weight)
