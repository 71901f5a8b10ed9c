"""A WRONG Triton ModelNew for relu_bias_scale.py: applies the scale before the relu and
forgets the bias, so negative-bias columns come out wrong."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_scale(X, Y, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, tl.maximum(x * scale, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu_scale[(triton.cdiv(n, 1024),)](x, y, n, self.scale, BLOCK=1024)
        return y
