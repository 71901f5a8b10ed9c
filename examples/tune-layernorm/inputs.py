"""Inputs of the layernorm: x (rows x features), a weight and a bias per feature."""

import torch


def _inputs(rows, cols, dtype, device):
    return [
        torch.randn(rows, cols, dtype=dtype, device=device),
        torch.rand(cols, dtype=dtype, device=device) + 0.5,
        torch.randn(cols, dtype=dtype, device=device),
    ]


def get_input_suite(device="cpu"):
    """Named input sets, each drawn when asked for (under the verifier's seed)."""
    return {"8192x8192 fp16": lambda: _inputs(8192, 8192, torch.float16, device)}


def get_cpu_inputs():
    """Small inputs for the CPU (Triton's interpreter), a row not a multiple of R."""
    return _inputs(5, 300, torch.float16, "cpu")
