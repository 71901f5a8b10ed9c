"""The reference: torch's matmul (cuBLAS on the GPU), in fp32 on the CPU."""

import torch


def reference(a, b):
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return a @ b
