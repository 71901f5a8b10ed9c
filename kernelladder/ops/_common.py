"""Helpers shared by the built-in ops: seeded generators, tolerances, the float compare,
the rules of the fence, and what the row-wise ops (x [M, N] in, y of x's shape and dtype
out) have in common.

Imports torch only (ops run alone on a GPU box).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelladder.ops.spec import ANY_SIZE_RULE, SANDBOX_RULE, Dim, Mismatch, OpSpec, Shape

# the contract's types, for the ops' signatures and tables
from kernelladder.ops.spec import Inputs as Inputs
from kernelladder.ops.spec import Layout as Layout
from kernelladder.ops.spec import Outputs as Outputs
from kernelladder.ops.spec import Tensors as Tensors
from kernelladder.ops.spec import Tolerance as Tolerance
from kernelladder.ops.spec import UnseenShapes as UnseenShapes

# From this many elements inputs are drawn on the device itself (a CPU draw of a
# 268M-element tensor takes seconds, of a 4M-element one 28 ms on the H200's host
# against 0.4 ms on the device); below it on the CPU, then copied, so the small shapes
# (every CPU suite) get the same values on any device.
DEVICE_DRAW_MIN_NUMEL = 1 << 16

# Output tolerances per dtype, |out - ref_hp| <= atol + rtol * |ref_hp|.
# bf16 / fp16: 2 ulp at the top of a binade (1 ulp at its bottom), i.e. anything within
# one ulp of the correctly rounded value passes; a truncating cast passes too.
# fp32: 1e-5 covers fp32 reductions of ~10^4 terms and exp2 approximations on GPUs.
# atol sits at each format's subnormal scale, so only flush-to-zero noise is absorbed.
ELEMENTWISE_TOL: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-30, rtol=1e-5),
    torch.bfloat16: Tolerance(atol=1e-30, rtol=2.0**-6),
    torch.float16: Tolerance(atol=2.0**-23, rtol=2.0**-9),
    torch.float64: Tolerance(atol=1e-300, rtol=1e-12),
}


def generator(seed: int, device: str, numel: int) -> torch.Generator:
    """A generator seeded by `seed`: on the CPU for small draws, on the device for big ones.

    Deterministic per (seed, device, numel); the caller passes `gen.device` to torch's
    random functions and moves the result to `device`.
    """
    where = "cpu"
    if numel >= DEVICE_DRAW_MIN_NUMEL and device.startswith("cuda"):
        where = device
    gen = torch.Generator(device=where)
    gen.manual_seed(int(seed))
    return gen


def randn(size: Sequence[int], gen: torch.Generator, device: str) -> torch.Tensor:
    """Standard normal fp32 on `device`, drawn with `gen`."""
    return torch.randn(tuple(size), generator=gen, device=gen.device).to(device)


def hard_row_plan(rows: int, kinds: Sequence[str], seed: int) -> list[tuple[int, str]]:
    """Which rows get which hard case: every kind once when there is room, else as many
    as half the rows allow (at least one), rotating by seed so every kind comes up.

    Drawn on its own CPU generator so the plan is the same on every device.
    """
    count = len(kinds) if rows >= 2 * len(kinds) else max(1, rows // 2)
    count = min(count, rows)
    cpu = torch.Generator().manual_seed(int(seed) * 7919 + 17)
    picked = [int(i) for i in torch.randperm(rows, generator=cpu)[:count]]
    return [(row, kinds[(seed + j) % len(kinds)]) for j, row in enumerate(picked)]


def error_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception as one line a person reads: its type and the first line of its text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:limit]}" if text else type(exc).__name__


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def compare_floats(
    name: str, out: torch.Tensor, ref_hp: torch.Tensor, tol: Tolerance
) -> Mismatch | None:
    """Element-wise check of one floating output against its high-precision reference.

    NaN/inf where the reference is finite always fails; where the reference is not
    finite the output must equal it. Returns the worst element (largest error/allowed).
    """
    o = out.detach().to(torch.float64)
    r = ref_hp.detach().to(device=o.device, dtype=torch.float64)
    if _all_within(o, r, tol):
        return None
    return _worst_element(name, o, r, tol)


def _all_within(o: torch.Tensor, r: torch.Tensor, tol: Tolerance) -> bool:
    """True when every element passes, in fewer passes over the fp64 tensors than the
    full check: where the reference is finite everywhere (then so is `allowed`, and its
    sum is finite), an element passes exactly when err <= allowed (an inf or NaN output
    gives an inf or NaN err, which fails), computed as the full check computes both.
    False (the full check decides) when anything fails, or a reference is not finite,
    or the sum overflows."""
    allowed = r.abs().mul_(tol.rtol).add_(tol.atol)
    if not math.isfinite(float(allowed.sum().item())):
        return False
    err = torch.sub(o, r).abs_()
    ok = err <= allowed
    return int(ok.sum().item()) == ok.numel()


def _worst_element(name: str, o: torch.Tensor, r: torch.Tensor, tol: Tolerance) -> Mismatch | None:
    err = (o - r).abs()
    allowed = tol.atol + tol.rtol * r.abs()
    finite_ref = torch.isfinite(r)
    ok_finite = (err <= allowed) & torch.isfinite(o)
    ok_nonfinite = (o == r) | (torch.isnan(o) & torch.isnan(r))
    ok = torch.where(finite_ref, ok_finite, ok_nonfinite)
    bad = ~ok
    count = int(bad.sum().item())
    if count == 0:
        return None
    ratio = torch.where(torch.isfinite(err), err / allowed, torch.full_like(err, math.inf))
    badness = torch.where(bad, ratio, torch.full_like(ratio, -1.0))
    flat = int(torch.argmax(badness.reshape(-1)).item())
    index = _unravel(flat, tuple(o.shape))
    expected, saw = float(r[index].item()), float(o[index].item())
    if math.isfinite(expected) and math.isnan(saw):
        reason = "nan where reference is finite"
    elif math.isfinite(expected) and math.isinf(saw):
        reason = "inf where reference is finite"
    elif not math.isfinite(expected):
        reason = f"reference is {expected}, output differs"
    else:
        reason = "out of tolerance"
    return Mismatch(
        output=name,
        index=index,
        expected=expected,
        saw=saw,
        error=float(err[index].item()),
        allowed=float(allowed[index].item()),
        count=count,
        total=o.numel(),
        reason=reason,
    )


def worst(mismatches: Sequence[Mismatch | None]) -> Mismatch | None:
    """The worst of several outputs' mismatches (by error/allowed), or None."""
    found = [m for m in mismatches if m is not None]
    if not found:
        return None

    def badness(m: Mismatch) -> float:
        if not math.isfinite(m.error) or m.allowed <= 0:
            return math.inf
        return m.error / m.allowed

    return max(found, key=badness)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(index))


def fence_text(signature: str, outputs: str, forbidden: str, extra: str = "") -> str:
    """The rules every candidate of a built-in op keeps (handed to proposers verbatim)."""
    rules = [
        f"Define `{signature}` at module level; it returns {outputs}.",
        "Compute with at least one Triton kernel launch (@triton.jit, or @gluon.jit from "
        "triton.experimental.gluon); torch may only "
        "allocate (torch.empty/empty_like/zeros) and make views (view/reshape/stride "
        "queries) — no torch compute ops.",
        f"Do not call the reference or a library equivalent: {forbidden}.",
        "Do not modify the inputs, return outputs that alias an input, launch work on side "
        "streams or threads, cache results across calls, or touch the verifier's timers, "
        "synchronization or comparisons.",
        "Return fresh, contiguous, plain torch.Tensor outputs of exactly the stated dtype "
        "and shape, on the inputs' device.",
        ANY_SIZE_RULE,
        SANDBOX_RULE,
    ]
    if extra:
        rules.append(extra)
    return "\n".join(f"- {rule}" for rule in rules)


def aten_ops(names: str) -> frozenset[str]:
    """OpSpec.forbidden_aten from space-separated aten names: "mm bmm" -> {"aten::mm", ...}."""
    return frozenset(f"aten::{name}" for name in names.split())


@dataclass
class FloatSpec(OpSpec):
    """A built-in op whose one output is checked element-wise against the float64
    reference, within `tolerance(shape)`."""

    def tolerance(self, shape: Shape) -> Tolerance:
        return ELEMENTWISE_TOL[shape.torch_dtype]

    def compare(
        self, outputs: Outputs, expected_hp: Outputs, inputs: Inputs, shape: Shape
    ) -> Mismatch | None:
        tol = self.tolerance(shape)
        return compare_floats(self.output_names[0], outputs[0], expected_hp[0], tol)


@dataclass
class RowSpec(FloatSpec):
    """An op over the rows of x [M, N] whose one output has x's shape and dtype."""

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        return (((shape.dims["M"], shape.dims["N"]), shape.torch_dtype),)

    @staticmethod
    def random_rows(
        shape: Shape, seed: int, device: str, scale: float = 1.0
    ) -> tuple[torch.Tensor, torch.Generator]:
        """x [M, N]: standard normal fp32 times `scale` on `device`, and the generator it
        was drawn with (the op's other inputs are drawn after it)."""
        m, n = shape.dims["M"], shape.dims["N"]
        gen = generator(seed, device, m * n)
        x = randn((m, n), gen, device)
        return (x * scale if scale != 1.0 else x), gen


def row_op(
    spec: type[RowSpec],
    name: str,
    summary: str,
    args: tuple[str, ...],
    square: str,
    odd: str,
    cpu_odd: str,
    outputs: str,
    forbidden: str,
    forbidden_aten: str,
) -> RowSpec:
    """A row-wise op: `kernel(args) -> y`, its starting candidate in its folder, the row
    ops' unseen shapes, and their suites: on the GPU long bf16 rows, a 4096 square
    (`square`), a tail, a tiny row and an fp16 shape (`odd`); on the CPU 7x100 fp32,
    33x257 bf16 and an fp16 one (`cpu_odd`). `outputs` and `forbidden` go to the fence,
    `forbidden_aten` are aten names, space-separated."""
    call = f"kernel({', '.join(args)})"
    gpu = ("32768x8192 bf16", square, "tail 3x4097 bf16", "tiny 1x1000 fp32", odd)
    return spec.builtin(
        name=name,
        summary=summary,
        signature=f"{call} -> y",
        arg_names=args,
        output_names=("y",),
        gpu_shapes=suite("M N", "", *gpu),
        cpu_shapes=suite("M N", "", "7x100 fp32", "33x257 bf16", cpu_odd),
        fence=fence_text(call, outputs, forbidden),
        unseen=ROW_UNSEEN,
        forbidden_aten=aten_ops(forbidden_aten),
    )


def suite(dims: str, dtype: str, *labels: str) -> tuple[Shape, ...]:
    """A built-in op's shape suite written as its labels, the sizes read from them.

    `dims` names the op's dims in order ("M N K"): "8192x8192x8192" gives them in that
    order, "tiny M1 N4096 K4096" names each one. A lower-case word ("tail", "tiny") says
    why the shape is there; a dtype's short name (bf16, fp16, fp32) is the shape's dtype,
    else `dtype`."""
    return tuple(_labelled(label, dims.split(), dtype) for label in labels)


SHORT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _labelled(label: str, names: list[str], dtype: str) -> Shape:
    sizes: dict[str, int] = {}
    for word in label.split():
        named = re.fullmatch(r"([A-Z])([0-9]+)", word)
        if word in SHORT_DTYPES:
            dtype = SHORT_DTYPES[word]
        elif re.fullmatch(r"[0-9]+(x[0-9]+)+", word) and word.count("x") == len(names) - 1:
            sizes.update(zip(names, map(int, word.split("x")), strict=True))
        elif named and named[1] in names:
            sizes[named[1]] = int(named[2])
        elif not word.isalpha() or not word.islower():
            raise ValueError(f"shape label {label!r}: cannot read {word!r}")
    if sorted(sizes) != sorted(names) or not dtype:
        raise ValueError(f"shape label {label!r}: sizes of {' '.join(names)} and a dtype needed")
    return Shape(label, {name: sizes[name] for name in names}, dtype)


# Unseen shapes of a row-wise op: rows beyond the suite in one shape, the row length in
# the other (together they would make the interpreter's CPU shape as costly as both).
ROW_UNSEEN = UnseenShapes(
    {"M": Dim(cpu_max=40, gpu_max=16384), "N": Dim(cpu_max=700, gpu_max=16384, lo=2, gpu_lo=256)},
    ("float32", "bfloat16", "float16"),
    beyond=(("N",), ("M",)),
)
