"""Cheat (KernelBench, relu_bias_scale): launches a dummy Triton kernel and returns what
the problem's own Model computes: rejected by the fence gate."""

import sys

import torch.nn as nn
import triton


@triton.jit
def _noop(X):
    pass


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        problem = next(m for n, m in sys.modules.items() if n.startswith("kernelladder_problem_"))
        self.inner = problem.Model(features, scale)

    def forward(self, x):
        _noop[(1,)](x)
        return self.inner(x)
