"""kv_quant: x bf16 [T, H, D] -> (q int8 [T, H, D], scale fp32 [T, H]).

Symmetric per-row (over D) absmax quantization: scale = absmax / 127 (1 for an all-zero
row), q = clamp(round(x / scale), -127, 127) with round-half-to-even as torch.round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelladder.ops import _common
from kernelladder.ops._common import Inputs, Layout, Outputs, Tensors, Tolerance
from kernelladder.ops.spec import Dim, FlopModel, Mismatch, OpSpec, Shape, UnseenShapes

QMAX = 127.0
# scale: a correctly rounded fp32 absmax / 127 is within 2^-24; absmax * (1/127) within
# ~2^-23. 1e-6 relative still rejects any other formula (e.g. / 128 or / 127.5).
SCALE_TOL = Tolerance(atol=0.0, rtol=1e-6)
# A code may be off by one only where x / scale (fp64) is this close to a .5 tie: fp32
# x / scale with a scale within SCALE_TOL moves the ratio (|ratio| <= 127) by < 2e-4.
TIE_EPS = 1e-3
# Row hard cases: "zero" (scale 1, codes 0), "outlier" (one element 100x the rest: most
# codes round to 0 or +-1), "tiny" (|x| ~ 1e-20: no underflow allowed), "ties" (scale
# exactly 1 and every ratio an exact .5 tie), "constant" (every code is +-127).
HARD_KINDS = ("zero", "outlier", "tiny", "ties", "constant")


@dataclass
class KvQuantSpec(OpSpec):
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        t, h, d = shape.dims["T"], shape.dims["H"], shape.dims["D"]
        gen = _common.generator(seed, device, t * h * d)
        rows = _common.randn((t * h, d), gen, device)
        # Rows of different magnitudes, as K/V rows of different tokens and heads are.
        rows *= torch.exp(0.5 * _common.randn((t * h, 1), gen, device))
        for row, kind in _common.hard_row_plan(t * h, HARD_KINDS, seed):
            if kind == "zero":
                rows[row] = 0.0
            elif kind == "outlier":
                rows[row, (seed * 13 + row) % d] = 100.0 * float(rows[row].abs().max())
            elif kind == "tiny":
                rows[row] *= 1e-20
            elif kind == "ties":
                ties = torch.arange(d, device=device, dtype=torch.float32) - d // 2 + 0.5
                rows[row] = ties.clamp(-126.5, 126.5)
                rows[row, 0] = QMAX  # absmax 127 -> scale exactly 1
            else:
                rows[row] = -1.75 if row % 2 else 1.75
        x = rows.reshape(t, h, d).to(torch.bfloat16).contiguous()
        return {"x": x}

    def input_layout(self, shape: Shape) -> dict[str, Layout]:
        return {"x": ((shape.dims["T"], shape.dims["H"], shape.dims["D"]), torch.bfloat16)}

    def reference(self, inputs: Inputs) -> Tensors:
        # Plain eager: cast, abs, amax, div, eq, where, div, round, clamp, cast.
        xf = inputs["x"].float()
        absmax = xf.abs().amax(dim=-1)
        scale = absmax / QMAX
        scale = torch.where(absmax == 0, torch.ones_like(scale), scale)
        q = torch.round(xf / scale[..., None]).clamp(-QMAX, QMAX).to(torch.int8)
        return (q, scale)

    def reference_hp(self, inputs: Inputs) -> Tensors:
        # Codes as int16 (exact), scale in fp64.
        scale = self._scale_hp(inputs["x"])
        ratio = inputs["x"].double() / scale[..., None]
        q = torch.round(ratio).clamp(-QMAX, QMAX).to(torch.int16)
        return (q, scale)

    @staticmethod
    def _scale_hp(x: torch.Tensor) -> torch.Tensor:
        absmax = x.double().abs().amax(dim=-1)
        return torch.where(absmax == 0, torch.ones_like(absmax), absmax / QMAX)

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        t, h, d = shape.dims["T"], shape.dims["H"], shape.dims["D"]
        return (((t, h, d), torch.int8), ((t, h), torch.float32))

    def compare(
        self, outputs: Outputs, expected_hp: Outputs, inputs: Inputs, shape: Shape
    ) -> Mismatch | None:
        scale_miss = _common.compare_floats("scale", outputs[1], expected_hp[1], SCALE_TOL)
        ratio = inputs["x"].double() / expected_hp[1].double()[..., None]
        code_miss = compare_codes("q", outputs[0], expected_hp[0], ratio)
        return _common.worst([code_miss, scale_miss])

    def bytes_moved(self, shape: Shape) -> int:
        t, h, d = shape.dims["T"], shape.dims["H"], shape.dims["D"]
        return t * h * d * (2 + 1) + t * h * 4

    def flops(self, shape: Shape) -> FlopModel:
        # abs, max, divide, round per element
        return FlopModel(4.0 * shape.dims["T"] * shape.dims["H"] * shape.dims["D"], "fp32")


def near_tie(ratio: torch.Tensor, eps: float = TIE_EPS) -> torch.Tensor:
    """Where round(ratio) is a near-tie: |ratio| is within eps of k + 0.5."""
    frac = ratio.abs() - ratio.abs().floor()
    return (frac - 0.5).abs() <= eps


def compare_codes(
    name: str, out: torch.Tensor, ref_codes: torch.Tensor, ratio: torch.Tensor
) -> Mismatch | None:
    """Exact int8 codes, except off by one where the reference's rounding is a near-tie."""
    o = out.detach().to(torch.int64)
    r = ref_codes.detach().to(device=o.device, dtype=torch.int64)
    diff = (o - r).abs()
    allowed = near_tie(ratio.to(o.device)).to(torch.int64)
    bad = diff > allowed
    count = int(bad.sum().item())
    if count == 0:
        return None
    excess = torch.where(bad, diff - allowed, torch.full_like(diff, -1))
    flat = int(torch.argmax(excess.reshape(-1)).item())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(o.shape)))
    d, a = int(diff[index].item()), int(allowed[index].item())
    reason = f"int8 code off by {d} (x/scale = {float(ratio[index].item()):.6f}"
    reason += ", a near-tie: 1 allowed)" if a else ", not a near-tie: must be exact)"
    return Mismatch(
        output=name,
        index=index,
        expected=float(r[index].item()),
        saw=float(o[index].item()),
        error=float(d),
        allowed=float(a),
        count=count,
        total=o.numel(),
        reason=reason,
    )


KV_QUANT = KvQuantSpec.builtin(
    name="kv_quant",
    summary="per-row symmetric absmax int8 quantization of K/V rows (bf16 -> int8 + fp32 scale)",
    signature="kernel(x) -> (q, scale)",
    arg_names=("x",),
    output_names=("q", "scale"),
    gpu_shapes=_common.suite(
        "T H D",
        "bfloat16",
        "65536x8x128",
        "4096x32x128",
        "tiny T1 H8 D128",
        "tail 1000x3x80",
        "333x4x256",
    ),
    cpu_shapes=_common.suite("T H D", "bfloat16", "17x2x32", "tail 5x3x80"),
    fence=_common.fence_text(
        "kernel(x)",
        "(q, scale): scale fp32 [T, H] = absmax over D / 127 (1.0 for an all-zero row), "
        "q int8 [T, H, D] = clamp(round_half_even(x / scale), -127, 127) (x bf16 [T, H, D])",
        "torch.abs / amax / max / round / clamp / div / where, torch quantize ops or any "
        "torch compute (aten::abs, aten::amax, aten::round, aten::clamp, aten::div, ...)",
    ),
    unseen=UnseenShapes(
        {
            "T": Dim(cpu_max=40, gpu_max=32768),
            "H": Dim(cpu_max=4, gpu_max=32),
            "D": Dim(0, 0, cpu_choices=(32, 64, 80, 96, 128), gpu_choices=(64, 80, 96, 128, 256)),
        },
        ("bfloat16",),
        # T and H beyond the suite together would be three times its largest: one shape each
        beyond=(("T", "D"), ("H",)),
    ),
    forbidden_aten=_common.aten_ops(
        "abs amax max aminmax div reciprocal round clamp clamp_min clamp_max clip where "
        "quantize_per_tensor quantize_per_channel quantize_per_tensor_dynamic "
        "fake_quantize_per_channel_affine"
    ),
)
