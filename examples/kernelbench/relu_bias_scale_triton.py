"""A correct Triton ModelNew for relu_bias_scale.py: one fused elementwise kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_bias_scale(X, B, Y, n_elements, features, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(X + offs, mask=mask, other=0.0)
    b = tl.load(B + offs % features, mask=mask, other=0.0)
    y = tl.maximum(x + b, 0.0) * scale
    tl.store(Y + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        # Same parameter, created in the same order as Model: same values under the same seed.
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024
        _relu_bias_scale[(triton.cdiv(n, block),)](x, self.bias, y, n, x.shape[-1], self.scale, BLOCK=block)
        return y
