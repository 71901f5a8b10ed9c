"""Cheat (KernelBench, relu_bias_scale): rewrites the problem's Model.forward so the
reference agrees with a wrong kernel: rejected by the anti-cheat gate."""

import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_problem = next(m for n, m in sys.modules.items() if n.startswith("kernelladder_problem_"))
_problem.Model.forward = lambda self, x: torch.zeros_like(x)


@triton.jit
def _zeros(Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(x.numel(), 1024),)](y, x.numel(), BLOCK=1024)
        return y
