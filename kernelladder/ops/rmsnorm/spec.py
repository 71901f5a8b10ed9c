"""rmsnorm: y = x * rsqrt(mean(x^2, -1) + 1e-6) * weight, computed in fp32, out x.dtype."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops.spec import (
    FlopModel,
    Inputs,
    Layout,
    Shape,
    Tensors,
)

EPS = 1e-6
# Row hard cases: "large" overflows x^2 in fp16 (and tests scale invariance), "small"
# makes eps matter (mean x^2 ~ eps), "equal" is a constant row, "zero" gives y = 0.
HARD_KINDS = ("large", "small", "equal", "zero")
LARGE_SCALE = {torch.float16: 1e3}  # fp16 holds at most 65504
DEFAULT_LARGE_SCALE = 1e4


@dataclass
class RmsNormSpec(_common.RowSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        x, gen = self.random_rows(shape, seed, device)
        weight = _common.randn((shape.dims["N"],), gen, device) * 0.5 + 1.0
        dtype = shape.torch_dtype
        for row, kind in _common.hard_row_plan(shape.dims["M"], HARD_KINDS, seed):
            if kind == "large":
                x[row] *= LARGE_SCALE.get(dtype, DEFAULT_LARGE_SCALE)
            elif kind == "small":
                x[row] *= 1e-3
            elif kind == "equal":
                x[row] = x[row, 0].abs() + 0.25
            else:
                x[row] = 0.0
        return {"x": x.to(dtype).contiguous(), "weight": weight.to(dtype).contiguous()}

    def input_layout(self, shape: Shape) -> dict[str, Layout]:
        m, n = shape.dims["M"], shape.dims["N"]
        return {"x": ((m, n), shape.torch_dtype), "weight": ((n,), shape.torch_dtype)}

    def reference(self, inputs: Inputs) -> Tensors:
        # Unfused eager: each line is its own kernel, as a model written plainly would do.
        x, weight = inputs["x"], inputs["weight"]
        xf = x.float()
        variance = xf.pow(2).mean(-1, keepdim=True)
        inv = torch.rsqrt(variance + EPS)
        y = xf * inv
        y = y * weight.float()
        return (y.to(x.dtype),)

    def reference_hp(self, inputs: Inputs) -> Tensors:
        x = inputs["x"].double()
        weight = inputs["weight"].double()
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
        return (x * inv * weight,)

    def bytes_moved(self, shape: Shape) -> int:
        m, n = shape.dims["M"], shape.dims["N"]
        return (2 * m * n + n) * _common.element_size(shape.torch_dtype)

    def flops(self, shape: Shape) -> FlopModel:
        # square, sum, scale by rsqrt, scale by weight: ~4 fp32 ops per element
        return FlopModel(4.0 * shape.dims["M"] * shape.dims["N"], "fp32")

    def library_baselines(self) -> dict[str, Callable[[Inputs], Any]]:
        rms_norm = getattr(torch.nn.functional, "rms_norm", None)  # torch >= 2.4
        if rms_norm is None:
            return {}

        def f_rms_norm(inputs: Inputs) -> torch.Tensor:
            x = inputs["x"]
            return rms_norm(x, (x.shape[-1],), inputs["weight"], EPS)

        return {"F.rms_norm": f_rms_norm}


RMSNORM = _common.row_op(
    RmsNormSpec,
    "rmsnorm",
    "RMS norm over the last dim with weight, fp32 math, eps 1e-6",
    ("x", "weight"),
    square="4096x4096 bf16",
    odd="777x5120 fp16",
    cpu_odd="9x64 fp16",
    outputs="y = x * rsqrt(mean(x^2, -1) + 1e-6) * weight computed in fp32, dtype x.dtype, "
    "shape [M, N] (x [M, N] fp32/bf16/fp16, weight [N] of x's dtype)",
    forbidden="F.rms_norm, torch.rsqrt, torch.mean, x.pow, torch.norm or any torch compute "
    "(aten::rms_norm, aten::_fused_rms_norm, aten::rsqrt, aten::mean, aten::pow, ...)",
    forbidden_aten="rms_norm _fused_rms_norm rsqrt mean pow norm linalg_vector_norm "
    "native_layer_norm layer_norm",
)
