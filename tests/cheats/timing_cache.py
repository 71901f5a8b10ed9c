"""Cheat: honest for the first 12 calls (the checked ones on the CPU suite with one seed),
then returns the previous result for the same input pointers without launching: the
calls being timed are not the calls that were checked. Rejected at anti-cheat."""

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
    if _CALLS[0] > 12 and key in _LAST:
        return _LAST[key]
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    _LAST[key] = y
    return y
