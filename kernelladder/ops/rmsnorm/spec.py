"""rmsnorm: y = x * rsqrt(mean(x^2, -1) + 1e-6) * weight, computed in fp32, out x.dtype."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops.registry import start_path
from kernelladder.ops.spec import Dim, FlopModel, Mismatch, OpSpec, Shape, UnseenShapes

EPS = 1e-6

# Row hard cases: "large" overflows x^2 in fp16 (and tests scale invariance), "small"
# makes eps matter (mean x^2 ~ eps), "equal" is a constant row, "zero" gives y = 0.
HARD_KINDS = ("large", "small", "equal", "zero")
LARGE_SCALE = {torch.float16: 1e3}  # fp16 holds at most 65504
DEFAULT_LARGE_SCALE = 1e4


@dataclass
class RmsNormSpec(OpSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        m, n = shape.dims["M"], shape.dims["N"]
        dtype = shape.torch_dtype
        gen = _common.generator(seed, device, m * n)
        x = _common.randn((m, n), gen, device)
        weight = _common.randn((n,), gen, device) * 0.5 + 1.0
        for row, kind in _common.hard_row_plan(m, HARD_KINDS, seed):
            if kind == "large":
                x[row] *= LARGE_SCALE.get(dtype, DEFAULT_LARGE_SCALE)
            elif kind == "small":
                x[row] *= 1e-3
            elif kind == "equal":
                x[row] = x[row, 0].abs() + 0.25
            else:
                x[row] = 0.0
        return {"x": x.to(dtype).contiguous(), "weight": weight.to(dtype).contiguous()}

    def input_layout(self, shape: Shape) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        m, n = shape.dims["M"], shape.dims["N"]
        return {"x": ((m, n), shape.torch_dtype), "weight": ((n,), shape.torch_dtype)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        # Unfused eager: each line is its own kernel, as a model written plainly would do.
        x, weight = inputs["x"], inputs["weight"]
        xf = x.float()
        variance = xf.pow(2).mean(-1, keepdim=True)
        inv = torch.rsqrt(variance + EPS)
        y = xf * inv
        y = y * weight.float()
        return (y.to(x.dtype),)

    def reference_hp(self, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        x = inputs["x"].double()
        weight = inputs["weight"].double()
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
        return (x * inv * weight,)

    def expected_outputs(self, shape: Shape) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
        return (((shape.dims["M"], shape.dims["N"]), shape.torch_dtype),)

    def compare(
        self,
        outputs: Sequence[torch.Tensor],
        expected_hp: Sequence[torch.Tensor],
        inputs: Mapping[str, torch.Tensor],
        shape: Shape,
    ) -> Mismatch | None:
        tol = _common.ELEMENTWISE_TOL[shape.torch_dtype]
        return _common.compare_floats("y", outputs[0], expected_hp[0], tol)

    def bytes_moved(self, shape: Shape) -> int:
        m, n = shape.dims["M"], shape.dims["N"]
        return (2 * m * n + n) * _common.element_size(shape.torch_dtype)

    def flops(self, shape: Shape) -> FlopModel:
        # square, sum, scale by rsqrt, scale by weight: ~4 fp32 ops per element
        return FlopModel(4.0 * shape.dims["M"] * shape.dims["N"], "fp32")

    def library_baselines(self) -> dict[str, Callable[[Mapping[str, torch.Tensor]], Any]]:
        rms_norm = getattr(torch.nn.functional, "rms_norm", None)  # torch >= 2.4
        if rms_norm is None:
            return {}

        def f_rms_norm(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
            x = inputs["x"]
            return rms_norm(x, (x.shape[-1],), inputs["weight"], EPS)

        return {"F.rms_norm": f_rms_norm}


def _shape(label: str, m: int, n: int, dtype: str) -> Shape:
    return Shape(label, {"M": m, "N": n}, dtype)


RMSNORM = RmsNormSpec(
    name="rmsnorm",
    summary="RMS norm over the last dim with weight, fp32 math, eps 1e-6",
    signature="kernel(x, weight) -> y",
    arg_names=("x", "weight"),
    output_names=("y",),
    gpu_shapes=(
        _shape("32768x8192 bf16", 32768, 8192, "bfloat16"),
        _shape("4096x4096 bf16", 4096, 4096, "bfloat16"),
        _shape("tail 3x4097 bf16", 3, 4097, "bfloat16"),
        _shape("tiny 1x1000 fp32", 1, 1000, "float32"),
        _shape("777x5120 fp16", 777, 5120, "float16"),
    ),
    cpu_shapes=(
        _shape("7x100 fp32", 7, 100, "float32"),
        _shape("33x257 bf16", 33, 257, "bfloat16"),
        _shape("9x64 fp16", 9, 64, "float16"),
    ),
    fence=_common.fence_text(
        "kernel(x, weight)",
        "y = x * rsqrt(mean(x^2, -1) + 1e-6) * weight computed in fp32, dtype x.dtype, "
        "shape [M, N] (x [M, N] fp32/bf16/fp16, weight [N] of x's dtype)",
        "F.rms_norm, torch.rsqrt, torch.mean, x.pow, torch.norm or any torch compute "
        "(aten::rms_norm, aten::_fused_rms_norm, aten::rsqrt, aten::mean, aten::pow, ...)",
    ),
    starting_candidate=str(start_path("rmsnorm")),
    unseen=UnseenShapes(
        {
            "M": Dim(cpu_max=40, gpu_max=16384),
            "N": Dim(cpu_max=700, gpu_max=16384, lo=2, gpu_lo=256),
        },
        ("float32", "bfloat16", "float16"),
        # rows beyond the suite in one shape, the row length in the other: together they
        # would make the interpreter's CPU shape as costly as both
        beyond=(("N",), ("M",)),
    ),
    forbidden_aten=frozenset(
        {
            "aten::rms_norm",
            "aten::_fused_rms_norm",
            "aten::rsqrt",
            "aten::mean",
            "aten::pow",
            "aten::norm",
            "aten::linalg_vector_norm",
            "aten::native_layer_norm",
            "aten::layer_norm",
        }
    ),
)
