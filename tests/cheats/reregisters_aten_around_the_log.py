"""Cheat: As reregisters_aten_cpu.py (x * weight, aten::rsqrt made to return ones on the
CPU), but registered through torch's own door dug out of whatever wraps it (the closure
of a wrapper is no secret in the same process), so no log of registrations sees it.
Rejected at anti-cheat all the same: the reference computed after the first call no
longer matches the fingerprint taken before the candidate loaded, and the dispatcher's
own listing names the kernel."""

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


def _unwrapped(fn, name):
    """torch's own function behind a wrapper that keeps it in its closure."""
    for cell in getattr(fn, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and getattr(inner, "__name__", "") == name:
            return inner
    return fn


_library = _unwrapped(torch._C._dispatch_library, "_dispatch_library")
_impl = _unwrapped(torch._C._DispatchModule.__dict__["impl"], "impl")
_handle = _library("IMPL", "aten", "", __file__, 1)
_impl(_handle, "rsqrt", "CPU", lambda x: torch.ones_like(x), False)


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _scale_rows[(m,)](x, weight, y, n, BLOCK=triton.next_power_of_2(n))
    return y
