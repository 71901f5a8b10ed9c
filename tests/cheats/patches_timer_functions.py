"""Cheat: A correct kernel that, as it loads, replaces every timing function a verifier
might read: time.perf_counter (100x slower clock), torch.cuda.Event's record and
elapsed_time (no time at all), torch.cuda.synchronize (a no-op), triton.testing.do_bench
and statistics.median (the code inside the function object swapped, its identity kept).
The verifier's timer reads none of them (torch._C's own events, stream, synchronize and
sleep, captured before any candidate; medians taken with builtins), so the candidate
would still get its true time; it is rejected at anti-cheat as it loads, each patch
named."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import statistics
import time

import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def _rms_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)


_real_clock = time.perf_counter
time.perf_counter = lambda: _real_clock() / 100.0
torch.cuda.Event.record = lambda self, stream=None: None
torch.cuda.Event.elapsed_time = lambda self, end_event: 1e-4
torch.cuda.synchronize = lambda device=None: None
triton.testing.do_bench = lambda *args, **kwargs: 1e-4
statistics.median.__code__ = (lambda data: 1e-6).__code__


def kernel(x, weight):
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y
