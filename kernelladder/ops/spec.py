"""The contract every op (built-in or KernelBench-format) fulfils for the verifier.

This module imports torch only; ops and the verifier run alone on a GPU box that has
just torch + triton (+ numpy for the CPU interpreter). Nothing here imports engine,
app, rich or textual.
"""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import torch

from kernelladder.ops.folders import start_path

Inputs = Mapping[str, torch.Tensor]  # a call's inputs by argument name
Outputs = Sequence[torch.Tensor]  # a call's outputs, in order
Tensors = tuple[torch.Tensor, ...]
Layout = tuple[tuple[int, ...], torch.dtype]  # a tensor's sizes and dtype


@dataclass(frozen=True)
class Shape:
    """One entry of a shape suite: named dims plus the input dtype."""

    label: str  # human label, e.g. "4096x4096 bf16" or "tail 37x4097 bf16"
    dims: Mapping[str, int]  # e.g. {"M": 4096, "N": 4096}
    dtype: str  # torch dtype name without "torch.", e.g. "bfloat16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "dims": dict(self.dims), "dtype": self.dtype}


@dataclass(frozen=True)
class Tolerance:
    """Element-wise |out - ref_hp| <= atol + rtol * |ref_hp| for floats.

    For integer outputs (int8 codes) `max_code_diff` is the largest allowed difference,
    and only where the reference's rounding is a near-tie (the op decides).
    """

    atol: float
    rtol: float
    max_code_diff: int = 0


@dataclass(frozen=True)
class Mismatch:
    """The worst disagreement found by `OpSpec.compare`, for the proposer's feedback."""

    output: str  # output name, e.g. "y" or "q"
    index: tuple[int, ...]  # index of the worst element
    expected: float  # high-precision reference value there
    saw: float  # candidate value there (may be nan/inf)
    error: float  # |saw - expected|
    allowed: float  # the tolerance at that element
    count: int  # how many elements are out of tolerance
    total: int  # how many elements were compared
    reason: str = ""  # e.g. "nan where reference is finite", "int8 code off by 3"


# What the sandbox allows a candidate (verifier/contract/sandbox.py), for every op's FENCE.
SANDBOX_RULE = (
    "The candidate runs walled in: it may allocate tensors, read its inputs, compile and "
    "launch Triton kernels (@triton.autotune too) and write its working directory and "
    "Triton's cache; writing any other file, reading files outside Python's and the "
    "libraries' own, network connections and other processes are denied and fail the "
    "verdict at anti-cheat."
)
# Correctness is also checked at sizes no prompt lists (OpSpec.unseen).
ANY_SIZE_RULE = (
    "Be correct for every size and dtype the signature allows, not only the shapes listed."
)


class OpLoadError(ValueError):
    """An op that cannot be found or loaded (unknown name, bad problem file); the message
    is one line for the user."""


class BaselineNotApplicable(Exception):
    """Raised by a library baseline for inputs it does not support (e.g. torch._int_mm
    with M <= 16, or off CUDA); the verifier reports that baseline as skipped there."""


@dataclass(frozen=True)
class Dim:
    """Sizes of one dimension at unseen shapes: log-uniform in [lo, cpu_max or gpu_max]
    (a third of draws a power of two, a third odd), or one of `choices` (head dims)
    where given. The CPU maxima stay small: the Triton interpreter is slow.

    `rule`: a dimension a kernel could specialise on (row length, rows, heads, sequence
    length, head dim): its unseen values are never a value of either suite, and one
    shape of every check takes it beyond the device's suite (`beyond`)."""

    cpu_max: int
    gpu_max: int
    lo: int = 1
    cpu_choices: tuple[int, ...] = ()
    gpu_choices: tuple[int, ...] = ()
    gpu_lo: int = 0  # the GPU's smallest size where it differs (0: lo)
    rule: bool = True

    def choices(self, device: str) -> tuple[int, ...]:
        return self.gpu_choices if device.startswith("cuda") else self.cpu_choices

    def bounds(self, device: str) -> tuple[int, int]:
        gpu = device.startswith("cuda")
        lo = (self.gpu_lo or self.lo) if gpu else self.lo
        return lo, max(lo, self.gpu_max if gpu else self.cpu_max)

    def draw(self, rng: random.Random, device: str, avoid: frozenset[int] = frozenset()) -> int:
        """A plausible size, not one of `avoid` where the range has another."""
        choices = self.choices(device)
        if choices:
            allowed = [c for c in choices if c not in avoid] or list(choices)
            return rng.choice(allowed)
        value = self._draw(rng, device)
        for _ in range(20):
            if value not in avoid:
                return value
            value = self._draw(rng, device)
        return _nearest_outside(value, avoid, *self.bounds(device))

    def _draw(self, rng: random.Random, device: str) -> int:
        lo, hi = self.bounds(device)
        kind = rng.randrange(3)
        if kind == 0:
            powers = [1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi]
            if powers:
                return rng.choice(powers)
        value = round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))
        value = min(hi, max(lo, value))
        if kind == 1 and value % 2 == 0:
            value = value + 1 if value < hi else max(lo, value - 1)
        return value

    def beyond(self, rng: random.Random, device: str, largest: int, avoid: frozenset[int]) -> int:
        """A size beyond the device's suite: for a free dimension an odd value above its
        largest size (within a sixteenth of it, at least 4 above), never one of `avoid`;
        for a head dim, a choice above the largest where the op allows one, else any
        choice not in `avoid`."""
        choices = self.choices(device)
        if choices:
            above = [c for c in choices if c > largest and c not in avoid]
            return rng.choice(above) if above else self.draw(rng, device, avoid)
        span = max(4, largest // 16)
        odd = [v for v in range(largest + 1, largest + span + 1) if v % 2 and v not in avoid]
        while not odd:  # every odd value of the span is a suite's: look further up
            span *= 2
            odd = [v for v in range(largest + 1, largest + span + 1) if v % 2 and v not in avoid]
        return rng.choice(odd)


def _nearest_outside(value: int, avoid: frozenset[int], lo: int, hi: int) -> int:
    """The size nearest `value` within [lo, hi] that is not one of `avoid` (`value` when
    every one is)."""
    for step in range(1, hi - lo + 2):
        for candidate in (value + step, value - step):
            if lo <= candidate <= hi and candidate not in avoid:
                return candidate
    return value


UNSEEN_BUDGET = 1.25  # an unseen shape costs at most this much the suite's costliest


@dataclass(frozen=True)
class UnseenShapes:
    """Where an op's unseen shapes come from: a Dim per dimension and the op's dtypes.
    They are chosen against the suites afresh for every verification and never shown to
    a proposer: every dimension a kernel could specialise on (Dim.rule) takes values
    neither suite uses, and each group of `beyond` (one group of them all by default)
    is taken beyond the device's suite together in one shape (odd, above its largest
    size), so a kernel correct only at the suite's sizes fails every time. The other
    dimensions of a shape are drawn as plausible sizes, within UNSEEN_BUDGET of the
    suite's costliest shape (`cost`: the op's measure of a shape) where they can be."""

    dims: Mapping[str, Dim]
    dtypes: tuple[str, ...]
    count: int = 2  # per verification
    beyond: tuple[tuple[str, ...], ...] = ()

    def groups(self, device: str) -> tuple[tuple[str, ...], ...]:
        if self.beyond:
            return self.beyond
        return (tuple(name for name, dim in self.dims.items() if dim.rule),)

    def draw(
        self,
        rng: random.Random,
        n: int,
        device: str,
        suite: Sequence[Shape] = (),
        device_suite: Sequence[Shape] = (),
        cost: Callable[[Shape], float] | None = None,
    ) -> tuple[Shape, ...]:
        """`n` shapes, none equal to a shape of `suite` nor to each other; the first ones
        beyond `device_suite` (the device's own), one group of dimensions each."""
        seen = {(tuple(sorted(s.dims.items())), s.dtype) for s in suite}
        avoid = {
            name: frozenset(s.dims[name] for s in suite if name in s.dims) for name in self.dims
        }
        local = device_suite or suite
        largest = {
            name: max((s.dims[name] for s in local if name in s.dims), default=0)
            for name in self.dims
        }
        budget = None
        if cost is not None and local:
            budget = UNSEEN_BUDGET * max(cost(s) for s in local)
        groups = self.groups(device)
        out: list[Shape] = []
        for i in range(n):
            group = groups[i] if i < len(groups) else ()
            best: tuple[float, Shape] | None = None
            for _ in range(60):
                dims = {
                    name: (
                        dim.beyond(rng, device, largest[name], avoid[name])
                        if name in group
                        else dim.draw(rng, device, avoid[name] if dim.rule else frozenset())
                    )
                    for name, dim in self.dims.items()
                }
                dtype = rng.choice(self.dtypes)
                key = (tuple(sorted(dims.items())), dtype)
                if key in seen:
                    continue
                words = " ".join(f"{name}{size}" for name, size in dims.items())
                shape = Shape(f"unseen {words} {DTYPE_SHORT.get(dtype, dtype)}", dims, dtype)
                price = cost(shape) if cost is not None else 0.0
                if best is None or price < best[0]:
                    best = (price, shape)
                if budget is None or price <= budget:
                    break
            if best is not None:
                shape = best[1]
                seen.add((tuple(sorted(shape.dims.items())), shape.dtype))
                out.append(shape)
        return tuple(out)


DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class FlopModel:
    count: float  # operations for one call
    unit: str  # which measured ceiling applies: "bf16", "fp16", "fp32", "int8"


@dataclass
class OpSpec(abc.ABC):
    """An op the verifier can check candidates against.

    Candidates for built-in ops define `kernel(*arg_names)`; candidates for
    KernelBench-format problems define `ModelNew(*init_inputs)` (see ops/kernelbench.py).
    """

    name: str
    summary: str
    signature: str  # e.g. "kernel(x, weight) -> y"
    arg_names: tuple[str, ...]
    output_names: tuple[str, ...]
    gpu_shapes: tuple[Shape, ...]
    cpu_shapes: tuple[Shape, ...]
    fence: str  # the FENCE text handed to proposers
    starting_candidate: str | None = None  # path of a plain correct Triton candidate
    # aten op names that equal the reference or a library equivalent; calling any of them
    # during the candidate's call fails the fence gate. Form: `aten_name(func)` below, the
    # schema name without overload, e.g. "aten::_softmax", "aten::mean", "aten::_int_mm".
    forbidden_aten: frozenset[str] = field(default_factory=frozenset)
    kind: str = "builtin"  # "builtin" or "kernelbench"
    # correctness is also checked at shapes drawn from here (None: the suite only, as for
    # KernelBench problems, whose get_inputs fixes the shapes)
    unseen: UnseenShapes | None = None

    @classmethod
    def builtin(cls, **fields: Any) -> Self:
        """A built-in op's spec from its fields; its starting candidate is start.py in the
        op's own folder (ops/NAME/)."""
        return cls(starting_candidate=str(start_path(fields["name"])), **fields)

    @property
    def compiled_baseline(self) -> bool:
        """Whether torch.compile of the reference is a baseline: False where the reference
        is itself a hand-written Triton kernel (a workspace without reference.py), which
        torch.compile cannot make into anything a user could use instead."""
        return True

    # --- inputs -------------------------------------------------------------------
    @abc.abstractmethod
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, torch.Tensor]:
        """Seeded inputs (keys = arg_names), including the op's hard cases."""

    def input_layout(self, shape: Shape) -> dict[str, Layout] | None:
        """Each input's sizes and dtype at `shape` (contiguous), as make_inputs makes them,
        without making them: the pipelined verifier compiles a candidate ahead on empty
        tensors of this layout. None: not described (the worker learns it from the
        inputs it makes)."""
        return None

    # --- reference ----------------------------------------------------------------
    @abc.abstractmethod
    def reference(self, inputs: Inputs) -> Tensors:
        """The fixed reference whose time the candidate must beat (outputs in order)."""

    @abc.abstractmethod
    def reference_hp(self, inputs: Inputs) -> Tensors:
        """A higher-precision reference (fp64 or exact) the outputs are compared to."""

    @abc.abstractmethod
    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        """(shape, dtype) of each output for inputs of this suite entry."""

    @abc.abstractmethod
    def compare(
        self, outputs: Outputs, expected_hp: Outputs, inputs: Inputs, shape: Shape
    ) -> Mismatch | None:
        """None when every output is within tolerance, else the worst mismatch.

        Shapes and dtypes were already checked by the verifier. NaN or inf where the
        reference is finite is always a mismatch.
        """

    # --- cost model -----------------------------------------------------------------
    @abc.abstractmethod
    def bytes_moved(self, shape: Shape) -> int:
        """The fewest bytes one call must move: each input read once, each output written once."""

    @abc.abstractmethod
    def flops(self, shape: Shape) -> FlopModel:
        """Arithmetic of one call and the ceiling it is measured against."""

    # --- baselines ------------------------------------------------------------------
    def library_baselines(self) -> dict[str, Callable[[Inputs], Any]]:
        """The best library ops for this op (e.g. {"F.rms_norm": fn}); torch.compile of
        the reference is added by the verifier itself. A baseline may raise
        `BaselineNotApplicable` for inputs it cannot take."""
        return {}

    # --- description ------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        words = {name: getattr(self, name) for name in ("name", "kind", "summary", "signature")}
        return {
            **words,
            "gpu_shapes": [s.to_dict() for s in self.gpu_shapes],
            "cpu_shapes": [s.to_dict() for s in self.cpu_shapes],
            "fence": self.fence,
        }

    def draw_unseen_shapes(self, rng: random.Random, n: int, device: str) -> tuple[Shape, ...]:
        """`n` shapes outside both suites, chosen against them (UnseenShapes.draw)."""
        if self.unseen is None or n <= 0:
            return ()
        return self.unseen.draw(
            rng,
            n,
            device,
            self.gpu_shapes + self.cpu_shapes,
            self.shapes_for(device),
            self.unseen_cost,
        )

    def unseen_cost(self, shape: Shape) -> float:
        """What an unseen shape costs to check, as its bytes moved (an op whose reference
        costs more than its bytes says so)."""
        return float(self.bytes_moved(shape))

    def shapes_for(self, device: str, suite: str | None = None) -> tuple[Shape, ...]:
        """The suite a verification times: `suite` ("gpu" or "cpu") when named, else
        the device's own."""
        if suite in ("gpu", "cpu"):
            return tuple(self.gpu_shapes if suite == "gpu" else self.cpu_shapes)
        return tuple(self.gpu_shapes if device.startswith("cuda") else self.cpu_shapes)


def aten_name(func: Any) -> str:
    """The name `OpSpec.forbidden_aten` uses for an op a TorchDispatchMode sees.

    `func` is the OpOverload given to `__torch_dispatch__` (e.g.
    torch.ops.aten._softmax.default); the name is its schema name without the overload
    suffix: "aten::_softmax" (not "aten._softmax.default", not "aten::mean.dim").
    """
    return str(func._schema.name)
