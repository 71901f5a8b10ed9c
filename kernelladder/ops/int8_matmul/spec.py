"""int8_matmul: (a @ b.T) exact in int32, times scale_a[:, None] * scale_b[None, :], as bf16.

Inputs use the full int8 range -128..127 (the worst case for int32 accumulation and for
sign handling); hard cases are rows of a or b that are all -128, all 127 or all zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops._common import Inputs, Layout, Tensors, Tolerance
from kernelladder.ops.spec import BaselineNotApplicable, Dim, FlopModel, Shape, UnseenShapes

A_HARD_KINDS = ("min", "max", "zero")
B_HARD_KINDS = ("min", "max")
_FILL = {"min": -128, "max": 127, "zero": 0}


@dataclass
class Int8MatmulSpec(_common.FloatSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        m, n, k = shape.dims["M"], shape.dims["N"], shape.dims["K"]
        gen = _common.generator(seed, device, (m + n) * k)
        where = gen.device

        def draw_int8(rows: int) -> torch.Tensor:
            return torch.randint(
                -128, 128, (rows, k), generator=gen, device=where, dtype=torch.int8
            )

        a, b = draw_int8(m), draw_int8(n)
        # Typical symmetric-quantization scales: absmax / 127 of O(1) values.
        scale_a = (torch.rand(m, generator=gen, device=where) + 0.5) / 127.0
        scale_b = (torch.rand(n, generator=gen, device=where) + 0.5) / 127.0
        for row, kind in _common.hard_row_plan(m, A_HARD_KINDS, seed):
            a[row] = _FILL[kind]
        for row, kind in _common.hard_row_plan(n, B_HARD_KINDS, seed + 1):
            b[row] = _FILL[kind]
        return {
            "a": a.to(device).contiguous(),
            "b": b.to(device).contiguous(),
            "scale_a": scale_a.to(device).contiguous(),
            "scale_b": scale_b.to(device).contiguous(),
        }

    def input_layout(self, shape: Shape) -> dict[str, Layout]:
        m, n, k = shape.dims["M"], shape.dims["N"], shape.dims["K"]
        return {
            "a": ((m, k), torch.int8),
            "b": ((n, k), torch.int8),
            "scale_a": ((m,), torch.float32),
            "scale_b": ((n,), torch.float32),
        }

    def reference(self, inputs: Inputs) -> Tensors:
        # fp32 matmul of int8 values is exact only while K * 128 * 128 < 2^24 (K < 1024);
        # the reference is what a plain model does, the comparison uses reference_hp.
        a, b = inputs["a"], inputs["b"]
        acc = torch.matmul(a.float(), b.float().t())
        out = acc * inputs["scale_a"][:, None] * inputs["scale_b"][None, :]
        return (out.to(torch.bfloat16),)

    def reference_hp(self, inputs: Inputs) -> Tensors:
        # Exact integer product in float64 (|a @ b.T| <= K * 2^14 < 2^53) times fp64 scales.
        a, b = inputs["a"].double(), inputs["b"].double()
        scale_a, scale_b = inputs["scale_a"].double(), inputs["scale_b"].double()
        return ((a @ b.t()) * scale_a[:, None] * scale_b[None, :],)

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        return (((shape.dims["M"], shape.dims["N"]), torch.bfloat16),)

    def tolerance(self, shape: Shape) -> Tolerance:
        # The int32 product is exact; what remains is fp32 scaling and the bf16 rounding.
        return _common.ELEMENTWISE_TOL[torch.bfloat16]

    def bytes_moved(self, shape: Shape) -> int:
        m, n, k = shape.dims["M"], shape.dims["N"], shape.dims["K"]
        return (m + n) * k + 4 * (m + n) + 2 * m * n

    def flops(self, shape: Shape) -> FlopModel:
        return FlopModel(2.0 * shape.dims["M"] * shape.dims["N"] * shape.dims["K"], "int8")

    def library_baselines(self) -> dict[str, Callable[[Inputs], Any]]:
        def int_mm(inputs: Inputs) -> torch.Tensor:
            a, b = inputs["a"], inputs["b"]
            m, k = a.shape
            n = b.shape[0]
            if not a.is_cuda:
                raise BaselineNotApplicable("torch._int_mm runs on CUDA only")
            if m <= 16 or k % 8 or n % 8:
                raise BaselineNotApplicable("torch._int_mm needs M > 16 and K, N multiples of 8")
            acc = torch._int_mm(a, b.t())
            out = acc.float() * inputs["scale_a"][:, None] * inputs["scale_b"][None, :]
            return out.to(torch.bfloat16)

        return {"torch._int_mm": int_mm}


INT8_MATMUL = Int8MatmulSpec.builtin(
    name="int8_matmul",
    summary="int8 x int8^T -> int32 exact, row/col scales, bf16 out",
    signature="kernel(a, b, scale_a, scale_b) -> c",
    arg_names=("a", "b", "scale_a", "scale_b"),
    output_names=("c",),
    gpu_shapes=_common.suite(
        "M N K",
        "int8",
        "8192x8192x8192",
        "2048x11008x4096",
        "tail 1037x999x1001",
        "tiny M1 N4096 K4096",
        "M16 N8192 K2048",
    ),
    cpu_shapes=_common.suite("M N K", "int8", "33x40x48", "tail 5x17x70", "64x32x96"),
    fence=_common.fence_text(
        "kernel(a, b, scale_a, scale_b)",
        "c = (a @ b.T, exact in int32) * scale_a[:, None] * scale_b[None, :] as bfloat16, "
        "shape [M, N] (a int8 [M, K], b int8 [N, K], scale_a fp32 [M], scale_b fp32 [N]; "
        "int8 values span -128..127)",
        "torch._int_mm, torch.matmul / mm / bmm / addmm / einsum / F.linear, "
        "torch._scaled_mm or any torch compute (aten::_int_mm, aten::mm, aten::matmul, ...)",
    ),
    unseen=UnseenShapes(
        {
            "M": Dim(cpu_max=64, gpu_max=4096),
            "N": Dim(cpu_max=80, gpu_max=8192, gpu_lo=256),
            "K": Dim(cpu_max=128, gpu_max=8192, gpu_lo=256),
        },
        ("int8",),
        # rows beyond the suite in one shape, columns and depth in the other: all three
        # beyond at once made every check's unseen product larger than the suite's
        # largest (the reference's float64 matmul and its fingerprint, twice before the
        # load and again after the call)
        beyond=(("M",), ("N", "K")),
    ),
    forbidden_aten=_common.aten_ops(
        "_int_mm mm matmul bmm addmm baddbmm addbmm einsum linear mv addmv dot _scaled_mm "
        "_weight_int8pack_mm _addmm_activation"
    ),
)
