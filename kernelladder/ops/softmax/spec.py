"""softmax: row softmax over the last dim of x [M, N] (fp32/bf16/fp16), out x.dtype."""

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

# Row hard cases: "large" (|x| ~ 1e4, exp overflows without max subtraction), "huge"
# (|x| near the format's top: x - max reaches -inf), "equal" (uniform result), "spike"
# (one dominant element: the result is nearly one-hot).
HARD_KINDS = ("large", "huge", "equal", "spike")
LARGE_SCALE = {torch.float16: 3e3}
DEFAULT_LARGE_SCALE = 1e4
HUGE_SCALE = {torch.float16: 2e4}
DEFAULT_HUGE_SCALE = 1e37
FP16_LIMIT = 65000.0


@dataclass
class SoftmaxSpec(_common.RowSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        x, _ = self.random_rows(shape, seed, device, scale=2.0)
        m, n = shape.dims["M"], shape.dims["N"]
        dtype = shape.torch_dtype
        for row, kind in _common.hard_row_plan(m, HARD_KINDS, seed):
            if kind == "large":
                x[row] *= LARGE_SCALE.get(dtype, DEFAULT_LARGE_SCALE)
            elif kind == "huge":
                x[row] *= HUGE_SCALE.get(dtype, DEFAULT_HUGE_SCALE)
            elif kind == "equal":
                x[row] = x[row, 0]
            else:
                x[row, (seed * 31 + row) % n] += 50.0
        if dtype == torch.float16:
            x = x.clamp(-FP16_LIMIT, FP16_LIMIT)
        return {"x": x.to(dtype).contiguous()}

    def input_layout(self, shape: Shape) -> dict[str, Layout]:
        return {"x": ((shape.dims["M"], shape.dims["N"]), shape.torch_dtype)}

    def reference(self, inputs: Inputs) -> Tensors:
        return (torch.softmax(inputs["x"], dim=-1),)

    def reference_hp(self, inputs: Inputs) -> Tensors:
        return (torch.softmax(inputs["x"].double(), dim=-1),)

    def bytes_moved(self, shape: Shape) -> int:
        m, n = shape.dims["M"], shape.dims["N"]
        return 2 * m * n * _common.element_size(shape.torch_dtype)

    def flops(self, shape: Shape) -> FlopModel:
        # max, subtract, exp, sum, divide: ~5 fp32 ops per element
        return FlopModel(5.0 * shape.dims["M"] * shape.dims["N"], "fp32")

    def library_baselines(self) -> dict[str, Callable[[Inputs], Any]]:
        def torch_softmax(inputs: Inputs) -> torch.Tensor:
            return torch.softmax(inputs["x"], dim=-1)

        return {"torch.softmax": torch_softmax}


SOFTMAX = _common.row_op(
    SoftmaxSpec,
    "softmax",
    "row softmax over the last dim (fp32/bf16/fp16)",
    ("x",),
    square="4096x4096 fp32",
    odd="1024x3000 fp16",
    cpu_odd="9x130 fp16",
    outputs="y = softmax(x) over the last dim, dtype x.dtype, shape [M, N] "
    "(x [M, N] fp32/bf16/fp16; rows may be of magnitude 1e4 or more: subtract the max)",
    forbidden="torch.softmax, F.softmax, log_softmax, torch.exp, torch.logsumexp, torch.amax "
    "or any torch compute (aten::_softmax, aten::softmax, aten::_safe_softmax, ...)",
    forbidden_aten="_softmax softmax _safe_softmax _log_softmax log_softmax special_softmax "
    "exp exp2 logsumexp amax max",
)
