"""y = relu(x + bias) * scale: a small KernelBench-format problem (runs fast on the CPU)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bias) * self.scale


batch_size = 16
features = 300
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
