"""Cheat: hides a background thread behind the name and class of torch.compile's idle
timer (a real inductor Timer, but calling the cheat's own function): still rejected by
the anti-cheat gate, which exempts only the timer of inductor's own worker pool."""

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


from torch._inductor.compile_worker.timer import Timer

_LATER = []


def _work_later():
    _LATER.append(1)


def kernel(x, weight):
    timer = Timer(30.0, _work_later)
    timer.record_call()  # starts a thread named "subproc_worker_timer"
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_rows[(m,)](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y
