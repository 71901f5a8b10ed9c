"""attention: causal softmax(q k^T / sqrt(D)) v for q, k, v [B, H, S, D] bf16/fp16."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops._common import Inputs, Layout, Tensors, Tolerance
from kernelladder.ops.spec import Dim, FlopModel, Shape, UnseenShapes

# The output is a convex combination of v rows (|v| ~ 1). A flash kernel rounds P to
# bf16 for the P v matmul (2^-9 relative per term) and rounds the result to bf16; the
# naive reference also rounds the raw scores to bf16 before the softmax (logit error up
# to |s| * 2^-9). Measured on S=1024 D=128: the reference uses ~60% of 2e-2 abs+rel, a
# flash kernel with fp32 scores ~16%; dropping the mask, the scale or a block is O(0.1-1).
ATTENTION_TOL: dict[torch.dtype, Tolerance] = {
    torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2),
    torch.float16: Tolerance(atol=4e-3, rtol=4e-3),
}
SHARP_HEAD_SCALE = 1.5  # one head gets sharper (still moderate) softmax rows


@dataclass
class AttentionSpec(_common.FloatSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        b, h, s, d = (shape.dims[k] for k in ("B", "H", "S", "D"))
        dtype = shape.torch_dtype
        gen = _common.generator(seed, device, 3 * b * h * s * d)
        q, k, v = (_common.randn((b, h, s, d), gen, device) for _ in range(3))
        for row, _kind in _common.hard_row_plan(b * h, ("sharp",), seed):
            q[row // h, row % h] *= SHARP_HEAD_SCALE
        return {name: t.to(dtype).contiguous() for name, t in (("q", q), ("k", k), ("v", v))}

    def input_layout(self, shape: Shape) -> dict[str, Layout]:
        sizes = tuple(shape.dims[k] for k in ("B", "H", "S", "D"))
        return {name: (sizes, shape.torch_dtype) for name in ("q", "k", "v")}

    def reference(self, inputs: Inputs) -> Tensors:
        # Naive: the full [S, S] score matrix is materialized, masked, softmaxed in fp32.
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        s = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)).float() * (1.0 / math.sqrt(q.shape[-1]))
        causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        return (torch.matmul(probs, v),)

    def reference_hp(self, inputs: Inputs) -> Tensors:
        q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
        s = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        return (torch.matmul(probs, v),)

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        dims = tuple(shape.dims[k] for k in ("B", "H", "S", "D"))
        return ((dims, shape.torch_dtype),)

    def tolerance(self, shape: Shape) -> Tolerance:
        return ATTENTION_TOL[shape.torch_dtype]

    def bytes_moved(self, shape: Shape) -> int:
        b, h, s, d = (shape.dims[k] for k in ("B", "H", "S", "D"))
        return 4 * b * h * s * d * _common.element_size(shape.torch_dtype)

    def flops(self, shape: Shape) -> FlopModel:
        # two matmuls (2 flops per multiply-add each) over the causal half: S(S+1)/2 pairs
        b, h, s, d = (shape.dims[k] for k in ("B", "H", "S", "D"))
        unit = "bf16" if shape.torch_dtype == torch.bfloat16 else "fp16"
        return FlopModel(4.0 * b * h * d * s * (s + 1) / 2, unit)

    def unseen_cost(self, shape: Shape) -> float:
        # the naive reference materializes the B x H x S x S scores
        b, h, s = (shape.dims[k] for k in ("B", "H", "S"))
        return float(b * h * s * s)

    def library_baselines(self) -> dict[str, Callable[[Inputs], Any]]:
        def sdpa(inputs: Inputs) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(
                inputs["q"], inputs["k"], inputs["v"], is_causal=True
            )

        return {"sdpa": sdpa}


ATTENTION = AttentionSpec.builtin(
    name="attention",
    summary="causal scaled dot-product attention, [B, H, S, D] bf16/fp16",
    signature="kernel(q, k, v) -> o",
    arg_names=("q", "k", "v"),
    output_names=("o",),
    gpu_shapes=_common.suite(
        "B H S D",
        "",
        "B4 H32 S2048 D128 bf16",
        "B1 H8 S4096 D128 bf16",
        "tail B2 H16 S1000 D64 fp16",
        "tiny B3 H5 S77 D128 bf16",
    ),
    cpu_shapes=_common.suite(
        "B H S D", "", "B1 H2 S32 D16 fp16", "tail B1 H2 S37 D16 bf16", "B2 H1 S20 D32 fp16"
    ),
    fence=_common.fence_text(
        "kernel(q, k, v)",
        "o = softmax(q k^T / sqrt(D) with the causal mask (key j <= query i)) v, dtype "
        "q.dtype, shape [B, H, S, D] (q, k, v [B, H, S, D] bf16/fp16)",
        "F.scaled_dot_product_attention, torch.matmul / bmm / mm / einsum, torch.softmax "
        "or any torch compute (aten::bmm, aten::_scaled_dot_product_flash_attention, "
        "aten::_flash_attention_forward, aten::_softmax, ...)",
    ),
    unseen=UnseenShapes(
        {
            # attention kernels run one program per (batch, head): heads carry the rule
            "B": Dim(cpu_max=2, gpu_max=4, rule=False),
            "H": Dim(cpu_max=3, gpu_max=16),
            "S": Dim(cpu_max=48, gpu_max=4096, gpu_lo=16),
            "D": Dim(0, 0, cpu_choices=(16, 32, 48, 64), gpu_choices=(64, 80, 96, 128)),
        },
        ("bfloat16", "float16"),
        # S and H beyond the suite together would make the reference's score matrix
        # (B H S^2) five times the suite's largest: one shape each
        beyond=(("S", "D"), ("H",)),
    ),
    forbidden_aten=_common.aten_ops(
        "bmm mm matmul baddbmm addmm addbmm einsum scaled_dot_product_attention "
        "_scaled_dot_product_attention_math _scaled_dot_product_flash_attention "
        "_scaled_dot_product_flash_attention_for_cpu "
        "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
        "_scaled_dot_product_fused_attention_overrideable _flash_attention_forward "
        "_efficient_attention_forward _softmax softmax _safe_softmax exp"
    ),
)
