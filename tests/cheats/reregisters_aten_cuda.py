"""Cheat: Computes x * weight (no normalisation) and re-registers aten::rsqrt for the CUDA
key so that torch's rsqrt returns ones on the GPU: there the reference, computed in the
same process, computes x * weight too. Rejected at anti-cheat on any device: the
registration is named as it is made (torch.library's door), before any trial (on the
CPU, where the kernel is not registered for the tensors at hand, the kernel's wrong
result would otherwise fail correctness)."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_rows(X, W, Y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * w).to(Y.dtype.element_ty), mask=mask)


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("rsqrt", lambda x: torch.ones_like(x), "CUDA")


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _scale_rows[(m,)](x, weight, y, n, BLOCK=triton.next_power_of_2(n))
    return y
