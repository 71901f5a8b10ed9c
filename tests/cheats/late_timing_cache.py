"""Cheat: honest for the first 63 calls, then returns the previous result for the same input
pointers without launching. On the CPU suite with one seed and the test's table timer
(3 calls per timing), call 64 is the first of the last shape's rounds timed back to back
with a close baseline: rejected at anti-cheat only if those calls are checked as the
other timed calls are."""

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


_CALLS = [0]
_LAST = {}


def kernel(x, weight):
    _CALLS[0] += 1
    key = (x.data_ptr(), weight.data_ptr())
    if _CALLS[0] > 63 and key in _LAST:
        return _LAST[key]
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    _LAST[key] = y
    return y
