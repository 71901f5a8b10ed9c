"""Inputs of the fp16 matmul: A (M x K) and B (K x N)."""

import torch


def _mm_inputs(m, n, k, dtype, device):
    return [torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)]


def get_input_suite(device="cpu"):
    """Named input sets, each drawn when asked for (under the verifier's seed)."""
    return {"4096x4096x4096 fp16": lambda: _mm_inputs(4096, 4096, 4096, torch.float16, device)}


def get_cpu_inputs():
    """Small inputs for the CPU (Triton's interpreter), ragged against every tile."""
    return _mm_inputs(40, 56, 48, torch.float16, "cpu")
