"""Cheat: Launches a dummy Triton kernel, returns F.rms_norm: rejected by the fence gate."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch
import triton


@triton.jit
def _noop(X):
    pass


def kernel(x, weight):
    _noop[(1,)](x)
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, 1e-6)
