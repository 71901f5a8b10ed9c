"""Inputs of the fused bias + GELU: activations (rows x features) and a bias per feature."""

import torch


def _bias_gelu_inputs(rows, cols, dtype, device):
    return [
        torch.randn(rows, cols, dtype=dtype, device=device),
        torch.randn(cols, dtype=dtype, device=device),
    ]


def get_input_suite(device="cpu"):
    """Named input sets, each drawn when asked for (under the verifier's seed)."""
    return {
        "4096x8192 bf16": lambda: _bias_gelu_inputs(4096, 8192, torch.bfloat16, device),
        "16384x8192 bf16": lambda: _bias_gelu_inputs(16384, 8192, torch.bfloat16, device),
    }


def get_cpu_inputs():
    """Small fp32 inputs for the CPU (Triton's interpreter), with a ragged last block."""
    return _bias_gelu_inputs(6, 300, torch.float32, "cpu")
