"""KernelBench-format problems as ops.

A problem file defines `Model` (an nn.Module), `get_inputs()` and `get_init_inputs()`;
a candidate defines `ModelNew` taking the same init arguments. The verifier receives
the problem's SOURCE TEXT (over the protocol), so a spec is built from source.

Weights: as in KernelBench's own evaluation, the reference `Model` and the candidate's
`ModelNew` are each constructed right after `torch.manual_seed(MODEL_SEED)`, so a
candidate that creates the same parameters in the same order gets identical values.
Inputs: `get_inputs()` under `torch.manual_seed(seed)` (the verifier's trial seed), then
moved to the device. Outputs are compared to a float64 copy of the model.

Imports torch only.
"""

from __future__ import annotations

import copy
import hashlib
import math
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops._common import Layout, Outputs, Tolerance
from kernelladder.ops.spec import SANDBOX_RULE, FlopModel, Mismatch, OpLoadError, OpSpec, Shape
from kernelladder.ops.user_code import (
    KERNELBENCH_TOL,
    MODEL_SEED,
    as_tensors,
    build_model,
    device_of,
    exec_source,
    seeded,
    widened,
)

REQUIRED = ("Model", "get_inputs", "get_init_inputs")

FENCE_TEMPLATE = """\
- Define `class ModelNew(torch.nn.Module)` taking the same init arguments as the problem's Model ({init}); `ModelNew(...)(*inputs)` returns what `Model.forward` returns.
- Parameters: ModelNew is built right after torch.manual_seed({seed}), as Model is; create the same parameters in the same order to get the same values.
- Compute with at least one Triton kernel launch (@triton.jit, or @gluon.jit from triton.experimental.gluon); do not call Model or its forward.
- Do not modify the inputs, return outputs that alias an input, launch work on side streams or threads, cache results across calls, or touch the verifier's timers, synchronization or comparisons.
- Return fresh plain torch.Tensor outputs of the reference's dtypes and shapes ({outputs}).
- """ + SANDBOX_RULE.replace("{", "{{").replace("}", "}}")


@dataclass
class KernelBenchSpec(OpSpec):
    """A KernelBench-format problem; build with `KernelBenchSpec.from_source`."""

    source: str = ""
    module: types.ModuleType | None = None
    output_meta: tuple[Layout, ...] = ()
    input_bytes: int = 0
    _reference_models: dict[str, Any] = field(default_factory=dict, repr=False)
    _hp_models: dict[str, Any] = field(default_factory=dict, repr=False)

    # --- construction ------------------------------------------------------------------
    @classmethod
    def from_source(cls, source: str, name: str = "problem.py") -> KernelBenchSpec:
        """Load a problem from its source text; OpLoadError (one line) when it is unusable."""
        module = _exec_problem(source, name)
        missing = [attr for attr in REQUIRED if not callable(getattr(module, attr, None))]
        if missing:
            raise OpLoadError(
                f"problem {name}: missing {', '.join(missing)} (KernelBench format needs {', '.join(REQUIRED)})"
            )
        try:
            inputs, outputs = _meta_run(module)
        except Exception as exc:
            raise OpLoadError(
                f"problem {name}: running Model on its inputs failed: {_common.error_line(exc)}"
            ) from None
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        floats = [t for t in tensors if t.is_floating_point()]
        dtype = (floats or tensors or [torch.empty(())])[0].dtype
        sizes = ", ".join(f"{list(t.shape)}" for t in tensors)
        shape = Shape(f"problem {sizes}".strip(), {}, str(dtype).removeprefix("torch."))
        arg_names = tuple(f"input{i}" for i in range(len(inputs)))
        output_names = tuple(f"output{i}" for i in range(len(outputs)))
        output_meta = tuple((tuple(t.shape), t.dtype) for t in outputs)
        stem = Path(name).stem or "problem"
        doc = (module.__doc__ or "").strip().splitlines()
        init_desc = _describe_init(module)
        out_desc = ", ".join(f"{list(s)} {str(d).removeprefix('torch.')}" for s, d in output_meta)
        return cls(
            name=stem,
            summary=doc[0] if doc else f"KernelBench problem {stem}",
            signature=f"ModelNew({init_desc})({', '.join(arg_names)}) -> {', '.join(output_names)}",
            arg_names=arg_names,
            output_names=output_names,
            gpu_shapes=(shape,),
            cpu_shapes=(shape,),
            fence=FENCE_TEMPLATE.format(
                init=init_desc or "no arguments", seed=MODEL_SEED, outputs=out_desc
            ),
            starting_candidate=None,
            forbidden_aten=frozenset(),
            kind="kernelbench",
            source=source,
            module=module,
            output_meta=output_meta,
            input_bytes=sum(t.numel() * t.element_size() for t in tensors),
        )

    # --- models ------------------------------------------------------------------------
    def init_inputs(self) -> list[Any]:
        """The problem's init arguments (drawn under MODEL_SEED, deterministic)."""
        return seeded(lambda: list(self._module.get_init_inputs()))

    def build_model(self, model_cls: Callable[..., Any], device: str) -> Any:
        """`model_cls(*init_inputs)` built right after torch.manual_seed(MODEL_SEED), on device."""
        return build_model(model_cls, self.init_inputs(), device)

    def build_candidate(self, model_cls: Callable[..., Any], device: str) -> Any:
        """The candidate's ModelNew, built as the reference Model is; call it with the
        inputs in arg_names order."""
        return self.build_model(model_cls, device)

    @property
    def _module(self) -> types.ModuleType:
        if self.module is None:
            self.module = _exec_problem(self.source, self.name)
        return self.module

    def _reference_model(self, device: str) -> Any:
        if device not in self._reference_models:
            self._reference_models[device] = self.build_model(self._module.Model, device)
        return self._reference_models[device]

    # --- OpSpec ------------------------------------------------------------------------
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, Any]:
        # Values may be non-tensors (ints, floats) when the problem's get_inputs returns them.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            raw = list(self._module.get_inputs())
        moved = [v.to(device).contiguous() if isinstance(v, torch.Tensor) else v for v in raw]
        return dict(zip(self.arg_names, moved, strict=True))

    def reference(self, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        args = [inputs[n] for n in self.arg_names]
        with torch.no_grad():
            return _as_tuple(self._reference_model(device_of(args))(*args))

    def reference_hp(self, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        """The reference in float64 (model and floating inputs); the plain reference if the
        problem cannot run in float64."""
        args = [inputs[n] for n in self.arg_names]
        device = device_of(args)
        try:
            if device not in self._hp_models:
                model = copy.deepcopy(self._reference_model(device))
                self._hp_models[device] = (
                    model.double() if isinstance(model, torch.nn.Module) else model
                )
            model = self._hp_models[device]
            with torch.no_grad():
                return _as_tuple(model(*widened(args)))
        except Exception:
            return self.reference(inputs)

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        return self.output_meta

    def compare(
        self, outputs: Outputs, expected_hp: Outputs, inputs: Mapping[str, Any], shape: Shape
    ) -> Mismatch | None:
        found = []
        for name, out, ref, (_, dtype) in zip(
            self.output_names, outputs, expected_hp, self.output_meta, strict=True
        ):
            if dtype.is_floating_point:
                tol = KERNELBENCH_TOL.get(dtype, KERNELBENCH_TOL[torch.float32])
            else:
                tol = Tolerance(atol=0.0, rtol=0.0)  # integer / bool outputs: exact
            found.append(_common.compare_floats(name, out, ref, tol))
        return _common.worst(found)

    def bytes_moved(self, shape: Shape) -> int:
        out_bytes = sum(math.prod(s) * _common.element_size(d) for s, d in self.output_meta)
        return self.input_bytes + out_bytes

    def flops(self, shape: Shape) -> FlopModel:
        return FlopModel(0.0, "fp32")  # unknown for an arbitrary problem

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model_seed": MODEL_SEED}


def _exec_problem(source: str, name: str) -> types.ModuleType:
    """Run the problem's source in a fresh module (registered so pickling/dataclasses work)."""
    digest = hashlib.sha256(source.encode("utf-8", "replace")).hexdigest()[:12]

    def failed(step: str, exc: BaseException) -> str:
        if step == "import":
            return f"problem {name}: failed to import: {_common.error_line(exc)}"
        where = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        why = getattr(exc, "msg", None) or str(exc)
        return f"problem {name}: syntax error{where}: {why}"

    return exec_source(source, f"kernelladder_problem_{digest}", name, failed)


def _meta_run(module: types.ModuleType) -> tuple[list[Any], tuple[torch.Tensor, ...]]:
    """Inputs and outputs of one call, as shapes only (meta tensors); falls back to a real
    CPU run for ops without meta kernels."""

    def one_call() -> tuple[list[Any], tuple[torch.Tensor, ...]]:
        model = module.Model(*list(module.get_init_inputs()))
        inputs = list(module.get_inputs())
        with torch.no_grad():
            return inputs, _as_tuple(model(*inputs))

    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            torch.manual_seed(MODEL_SEED)
            inputs, outputs = one_call()
        if all(t.is_meta for t in outputs):
            return inputs, outputs
    except Exception:
        pass
    return seeded(one_call)


def _as_tuple(result: Any) -> tuple[torch.Tensor, ...]:
    return as_tensors(result, "Model.forward must return a tensor or a tuple of tensors")


def _describe_init(module: types.ModuleType) -> str:
    try:
        init = seeded(lambda: list(module.get_init_inputs()))
    except Exception:
        return "..."
    return ", ".join(
        repr(v) if not isinstance(v, torch.Tensor) else f"tensor{list(v.shape)}" for v in init
    )
