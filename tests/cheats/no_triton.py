"""Cheat: Pure torch, no Triton launch: rejected by the fence gate."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import torch


def kernel(x, weight):
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (xf * inv * weight.float()).to(x.dtype)
