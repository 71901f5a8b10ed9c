"""Cheat: Computes x * weight (no normalisation) and re-registers aten::rsqrt for the CPU
key so that torch's rsqrt returns ones: the reference, computed in the same process,
then computes x * weight too. Rejected at anti-cheat: the registration is named as it is
made (torch.library's door), and the reference no longer matches its fingerprint."""

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
_lib.impl("rsqrt", lambda x: torch.ones_like(x), "CPU")


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _scale_rows[(m,)](x, weight, y, n, BLOCK=triton.next_power_of_2(n))
    return y
