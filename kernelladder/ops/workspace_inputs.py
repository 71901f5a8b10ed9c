"""A workspace's inputs.py: the labels of its suite, the inputs of one label drawn under
a seed on a device, and the suite entry (Shape) each label stands for.

Imports torch only.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops.spec import OpLoadError, Shape
from kernelladder.ops.workspace_files import INPUTS_FILE

CPU_LABEL = "cpu"  # the suite entry drawn by get_cpu_inputs()


def suite_labels(inputs_mod: types.ModuleType, where: str) -> tuple[str, ...]:
    suite = getattr(inputs_mod, "get_input_suite", None)
    if callable(suite):
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                labels = tuple(str(k) for k in dict(with_device(suite, "cpu")))
        except Exception as exc:
            raise OpLoadError(
                f"{where}: get_input_suite() failed: {_common.error_line(exc, 300)}"
            ) from None
        if not labels:
            raise OpLoadError(f"{where}: get_input_suite() returned no input sets")
        return labels
    if callable(getattr(inputs_mod, "get_inputs", None)):
        return ("inputs",)
    raise OpLoadError(f"{where}: {INPUTS_FILE} defines neither get_inputs() nor get_input_suite()")


def with_device(fn: Callable[..., Any], device: str) -> Any:
    """fn(device=...) when it takes a device (inputs drawn where they are used: a CPU
    draw of a big tensor takes seconds), else fn()."""
    try:
        takes = "device" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    return fn(device=device) if takes else fn()


def draw(
    inputs_mod: types.ModuleType, label: str, seed: int, where: str, device: str = "cpu"
) -> list[Any]:
    """The inputs for one suite label under torch.manual_seed(seed); a suite's value may
    be the inputs or a function drawing them."""
    try:
        devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed))
            if label.startswith(CPU_LABEL) and callable(
                getattr(inputs_mod, "get_cpu_inputs", None)
            ):
                raw = with_device(inputs_mod.get_cpu_inputs, "cpu")
            elif callable(getattr(inputs_mod, "get_input_suite", None)):
                raw = dict(with_device(inputs_mod.get_input_suite, device))[label]
                if callable(raw):
                    raw = raw()
            else:
                raw = with_device(inputs_mod.get_inputs, device)
            return list(raw)
    except OpLoadError:
        raise
    except Exception as exc:
        raise OpLoadError(
            f"{where}: drawing the inputs ({label}) failed: {_common.error_line(exc, 300)}"
        ) from None


def suite_shape(inputs_mod: types.ModuleType, label: str, where: str) -> Shape:
    """A suite entry; sizes and dtype read from a draw on the meta device (no data)."""
    raw = draw(inputs_mod, label, 0, where, "meta")
    tensors = [v for v in raw if isinstance(v, torch.Tensor)]
    floats = [t for t in tensors if t.is_floating_point()]
    dtype = str((floats or tensors or [torch.empty(())])[0].dtype).removeprefix("torch.")
    dims = {f"input{i}": int(v) for i, v in enumerate(raw) if isinstance(v, int)}
    if label == CPU_LABEL:
        sizes = " ".join("x".join(str(d) for d in t.shape) for t in tensors)
        return Shape(f"{CPU_LABEL} {sizes} {dtype}".strip(), dims, dtype)
    return Shape(label, dims, dtype)


def input_key(args: Sequence[Any]) -> tuple:
    return tuple(
        (tuple(a.shape), str(a.dtype), a.device.type)
        if isinstance(a, torch.Tensor)
        else ("value", repr(a))
        for a in args
    )
