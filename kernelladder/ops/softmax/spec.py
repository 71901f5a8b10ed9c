"""softmax: row softmax over the last dim of x [M, N] (fp32/bf16/fp16), out x.dtype."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops.registry import start_path
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
        m, n = shape.dims["M"], shape.dims["N"]
        dtype = shape.torch_dtype
        gen = _common.generator(seed, device, m * n)
        x = _common.randn((m, n), gen, device) * 2.0
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


SOFTMAX = SoftmaxSpec(
    name="softmax",
    summary="row softmax over the last dim (fp32/bf16/fp16)",
    signature="kernel(x) -> y",
    arg_names=("x",),
    output_names=("y",),
    gpu_shapes=_common.row_shapes(
        ("32768x8192 bf16", 32768, 8192, "bfloat16"),
        ("4096x4096 fp32", 4096, 4096, "float32"),
        ("tail 3x4097 bf16", 3, 4097, "bfloat16"),
        ("tiny 1x1000 fp32", 1, 1000, "float32"),
        ("1024x3000 fp16", 1024, 3000, "float16"),
    ),
    cpu_shapes=_common.row_shapes(
        ("7x100 fp32", 7, 100, "float32"),
        ("33x257 bf16", 33, 257, "bfloat16"),
        ("9x130 fp16", 9, 130, "float16"),
    ),
    fence=_common.fence_text(
        "kernel(x)",
        "y = softmax(x) over the last dim, dtype x.dtype, shape [M, N] "
        "(x [M, N] fp32/bf16/fp16; rows may be of magnitude 1e4 or more: subtract the max)",
        "torch.softmax, F.softmax, log_softmax, torch.exp, torch.logsumexp, torch.amax "
        "or any torch compute (aten::_softmax, aten::softmax, aten::_safe_softmax, ...)",
    ),
    starting_candidate=str(start_path("softmax")),
    unseen=_common.ROW_UNSEEN,
    forbidden_aten=_common.aten_ops(
        "_softmax softmax _safe_softmax _log_softmax log_softmax special_softmax exp exp2 "
        "logsumexp amax max"
    ),
)
