"""Running a user's Python for an op: a source executed as a fresh module, models built
under the seed both the reference and the candidate get, the results of a call as a tuple
of tensors, a float64 copy of a call's arguments, and the tolerances of such ops.

Imports torch only.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelladder.ops.spec import OpLoadError, Tolerance

MODEL_SEED = 42  # seed before building Model and ModelNew (KernelBench does the same)

# KernelBench's own checker uses allclose(atol=1e-2, rtol=1e-2); fp32 matmuls in Triton
# default to TF32 on GPUs, so tighter fp32 bounds would reject kernels KernelBench accepts.
KERNELBENCH_TOL: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-2, rtol=1e-2),
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
    torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2),
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7),
}
# A workspace's, as KernelBench's but for fp32: a reference that is the user's own kernel
# in the same dtype differs from a re-blocked candidate by rounding only.
WORKSPACE_TOL = {**KERNELBENCH_TOL, torch.float32: Tolerance(atol=1e-4, rtol=1e-4)}


def exec_source(
    source: str, module_name: str, filename: str, failed: Callable[[str, BaseException], str]
) -> types.ModuleType:
    """`source` run as the module `module_name` (registered, so dataclasses and pickle
    work); OpLoadError(failed("syntax" or "import", exc)) when it does not compile or run."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, on some Pythons
        raise OpLoadError(failed("syntax", exc)) from None
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit from a user's file is a load failure too
        sys.modules.pop(module_name, None)
        raise OpLoadError(failed("import", exc)) from None
    return module


def seeded(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) right after torch.manual_seed(MODEL_SEED), the global generator left as
    it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        return fn(*args)


def build_model(model_cls: Callable[..., Any], init: Sequence[Any], device: str) -> Any:
    """`model_cls(*init)` built right after torch.manual_seed(MODEL_SEED); an nn.Module
    moved to `device` in eval mode."""
    model = seeded(model_cls, *init)
    if isinstance(model, torch.nn.Module):
        model = model.to(device).eval()
    return model


def as_tensors(result: Any, expected: str) -> tuple[torch.Tensor, ...]:
    """A call's result as a tuple of tensors; TypeError `expected`, got TYPE, else."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise TypeError(f"{expected}, got {type(result).__name__}")


def device_of(args: Sequence[Any]) -> str:
    """The device of the first tensor argument ("cpu" without one)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return str(a.device)
    return "cpu"


def widened(args: Sequence[Any]) -> list[Any]:
    """The arguments with every floating tensor in float64."""
    return [
        a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    ]
