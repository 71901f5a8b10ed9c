"""The user's own kernel as an op: a workspace directory.

    DIR/kernel.py      the kernel to optimize: `kernel(*inputs)` or a `ModelNew` nn.Module
    DIR/inputs.py      get_inputs() (and get_init_inputs() for a ModelNew); optional:
                       get_input_suite() -> {label: inputs} for several shapes, and
                       get_cpu_inputs() (small inputs for the CPU interpreter)
    DIR/reference.py   optional: reference(*inputs) or a KernelBench `Model`; when absent
                       the user's original kernel is the golden reference
    DIR/HINTS.md       optional: the run's global hints
    DIR/knowledge/     optional: notes for the api/code proposers

Candidates take the kernel's own form (same function name and arguments, or ModelNew
with the same init arguments). The verifier receives the files' texts, so a spec is
built from sources; `from_dir` also checks the kernel against the reference on the
first inputs and says in one line what is wrong.

Imports torch (and triton, through the user's kernel) only.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelladder.ops import _common
from kernelladder.ops._common import Layout, Outputs, Tolerance
from kernelladder.ops.spec import FlopModel, Mismatch, OpLoadError, OpSpec, Shape
from kernelladder.ops.user_code import (
    WORKSPACE_TOL,
    as_tensors,
    build_model,
    device_of,
    seeded,
    widened,
)
from kernelladder.ops.workspace_files import (
    INPUTS_FILE,
    KERNEL_FILE,
    KIND,
    REFERENCE_FILE,
    WorkspaceFiles,
    interpreter_or_fail,
    load_module,
    read_file,
)
from kernelladder.ops.workspace_inputs import CPU_LABEL, draw, input_key, suite_labels, suite_shape

ORIGINAL_REFERENCE_NOTE = "the reference is your original kernel (no reference.py)"

FENCE_TEMPLATE = """\
- Keep the kernel's entry point: {entry}; it returns what the original returns ({outputs}).
- Compute with Triton kernel launches (@triton.jit); torch only for allocation and views (empty, empty_like, view, reshape, stride); no torch compute, no dtype casts in torch.
- Do not call the reference ({reference}).
- Do not modify the inputs, return outputs that alias an input, launch work on side streams or threads, cache results across calls, or touch the verifier's timers, synchronization or comparisons."""


@dataclass
class WorkspaceSpec(OpSpec):
    """A user's kernel with its inputs (and maybe a reference); build with `from_dir` or
    `from_files`."""

    files: WorkspaceFiles | None = None
    entry: str = "kernel"  # "kernel" (a function) or "ModelNew" (an nn.Module)
    reference_kind: str = "original"  # "original" | "function" | "model"
    input_bytes: dict[str, int] = field(default_factory=dict)  # per shape label
    _modules: dict[str, types.ModuleType] = field(default_factory=dict, repr=False)
    _ref_callables: dict[str, Any] = field(default_factory=dict, repr=False)
    _hp_callables: dict[str, Any] = field(default_factory=dict, repr=False)
    _output_meta: dict[tuple, tuple] = field(default_factory=dict, repr=False)
    _label_key: dict[str, tuple] = field(default_factory=dict, repr=False)
    _timed: list[Any] = field(default_factory=list, repr=False)  # [id(inputs), entry]

    # --- construction ------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path: str | Path, *, check: bool = True) -> WorkspaceSpec:
        """Read DIR's files; with `check`, run the kernel and the reference on the first
        inputs. OpLoadError (one line) for anything a user must fix."""
        root = Path(path)
        where = f"workspace {path}"
        if not root.is_dir():
            raise OpLoadError(f"{where}: not a directory")
        kernel = read_file(root / KERNEL_FILE, where, required=True)
        inputs = read_file(root / INPUTS_FILE, where, required=False)
        if inputs is None:
            raise OpLoadError(
                f"{where}: no {INPUTS_FILE} (it defines get_inputs() returning the kernel's inputs)"
            )
        reference = read_file(root / REFERENCE_FILE, where, required=False)
        name = root.resolve().name or "workspace"
        if check and not torch.cuda.is_available():
            interpreter_or_fail(where)
        spec = cls.from_files(WorkspaceFiles(name, kernel or "", inputs, reference))
        if check:
            outputs = spec.check_first_inputs(where)
            if outputs != spec.files.outputs:  # type: ignore[union-attr]
                files = dataclasses.replace(spec.files, outputs=outputs)
                spec = cls.from_files(files)
        return spec

    @classmethod
    def from_files(cls, files: WorkspaceFiles) -> WorkspaceSpec:
        where = f"workspace {files.name}"
        kernel_mod = load_module(files.kernel, KERNEL_FILE, where, "kernel")
        inputs_mod = load_module(files.inputs, INPUTS_FILE, where, "inputs")
        if files.reference is not None:
            ref_mod = load_module(files.reference, REFERENCE_FILE, where, "reference")
            if callable(getattr(ref_mod, "reference", None)):
                reference_kind = "function"
            elif isinstance(getattr(ref_mod, "Model", None), type):
                reference_kind = "model"
            else:
                raise OpLoadError(
                    f"{where}: {REFERENCE_FILE} defines neither reference(...) nor a Model class"
                )
        else:
            reference_kind = "original"
        fn = kernel_mod.__dict__.get("kernel")
        model_new = kernel_mod.__dict__.get("ModelNew")
        if callable(fn) and not isinstance(fn, type):
            entry = "kernel"
            arg_names = _positional_names(fn)
        elif isinstance(model_new, type):
            entry = "ModelNew"
            arg_names = ()
        else:
            raise OpLoadError(f"{where}: {KERNEL_FILE} defines neither kernel(...) nor ModelNew")
        labels = suite_labels(inputs_mod, where)
        cpu_labels = (
            (CPU_LABEL,) if callable(getattr(inputs_mod, "get_cpu_inputs", None)) else labels[:1]
        )
        if entry == "ModelNew" or not arg_names:
            count = len(draw(inputs_mod, labels[0], 0, where))
            arg_names = tuple(f"input{i}" for i in range(count))
        gpu_shapes = tuple(suite_shape(inputs_mod, label, where) for label in labels)
        cpu_shapes = tuple(suite_shape(inputs_mod, label, where) for label in cpu_labels)
        reference_text = {
            "original": f"your original {KERNEL_FILE} is the reference",
            "function": f"{REFERENCE_FILE}: reference(...)",
            "model": f"{REFERENCE_FILE}: Model",
        }[reference_kind]
        entry_text = (
            f"kernel({', '.join(arg_names)})"
            if entry == "kernel"
            else "class ModelNew(torch.nn.Module) with the original's init arguments"
        )
        doc = (kernel_mod.__doc__ or "").strip().splitlines()
        spec = cls(
            name=files.name,
            summary=doc[0] if doc else f"your kernel ({files.name}/{KERNEL_FILE})",
            signature=(
                f"kernel({', '.join(arg_names)}) -> outputs"
                if entry == "kernel"
                else f"ModelNew(...)({', '.join(arg_names)}) -> outputs"
            ),
            arg_names=arg_names,
            output_names=(),
            gpu_shapes=gpu_shapes,
            cpu_shapes=cpu_shapes,
            fence="",
            starting_candidate=None,
            forbidden_aten=frozenset(),
            kind=KIND,
            files=files,
            entry=entry,
            reference_kind=reference_kind,
        )
        spec._modules = {"kernel": kernel_mod, "inputs": inputs_mod}
        if files.reference is not None:
            spec._modules["reference"] = ref_mod
        spec.output_names = tuple(f"output{i}" for i in range(max(1, files.outputs)))
        spec.fence = FENCE_TEMPLATE.format(
            entry=entry_text,
            outputs="the same tensors, shapes and dtypes",
            reference=reference_text,
        )
        return spec

    # --- what the engine shows ------------------------------------------------------------
    @property
    def source(self) -> str:
        """All texts at once: the verifier keys its caches (baselines) on this."""
        f = self.files
        assert f is not None
        return "\n# --\n".join([f.kernel, f.inputs, f.reference or ""])

    @property
    def compiled_baseline(self) -> bool:
        return self.reference_kind != "original"

    @property
    def reference_note(self) -> str:
        return ORIGINAL_REFERENCE_NOTE if self.reference_kind == "original" else ""

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "entry": self.entry,
            "reference": self.reference_kind,
            "reference_note": self.reference_note,
        }

    # --- the load-time check --------------------------------------------------------------
    def check_first_inputs(self, where: str) -> int:
        """Run the reference and the user's kernel on the first inputs of this machine's
        suite; OpLoadError naming the output and the error when they disagree."""
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            interpreter_or_fail(where)
        shape = self.shapes_for(device)[0]
        inputs = self.make_inputs(shape, 0, device)
        try:
            expected = self.reference_hp(inputs) if self.reference_kind != "original" else None
        except Exception as exc:
            raise OpLoadError(
                f"{where}: {REFERENCE_FILE} failed on the first inputs: {_common.error_line(exc, 300)}"
            ) from None
        try:
            outs = _as_tuple(self._call_original(inputs, device))
        except Exception as exc:
            raise OpLoadError(
                f"{where}: {KERNEL_FILE} failed on the first inputs: {_common.error_line(exc, 300)}"
            ) from None
        if expected is None:
            return len(outs)
        self._check_reference_repeats(where, shape, device, expected)
        if len(outs) != len(expected):
            raise OpLoadError(
                f"{where}: {KERNEL_FILE} returns {len(outs)} output(s), the reference {len(expected)}"
            )
        for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
            if tuple(o.shape) != tuple(e.shape):
                raise OpLoadError(
                    f"{where}: {KERNEL_FILE} output{i} has shape {list(o.shape)}, "
                    f"the reference {list(e.shape)}"
                )
        m = self.compare(outs, expected, inputs, shape)
        if m is not None:
            raise OpLoadError(
                f"{where}: {KERNEL_FILE} does not match the reference on the first inputs "
                f"({shape.label}): {m.output} off by {m.error:.3g} at {list(m.index)} "
                f"(expected {m.expected:.6g}, got {m.saw:.6g}, allowed {m.allowed:.3g}; "
                f"{m.count} of {m.total} elements out of tolerance)"
            )
        return len(outs)

    def _check_reference_repeats(
        self, where: str, shape: Any, device: str, first: tuple[Any, ...]
    ) -> None:
        """The reference run again on the same inputs must give the same outputs (within
        the op's tolerance): one that is not a function of its inputs (dropout left on, a
        model in train mode, an unseeded random op) is the reference's fault, and every
        kernel would be blamed for it."""
        inputs = self.make_inputs(shape, 0, device)
        try:
            again = _as_tuple(self.reference_hp(inputs))
        except Exception as exc:
            raise OpLoadError(
                f"{where}: {REFERENCE_FILE} failed when run again on the first inputs: "
                f"{_common.error_line(exc, 300)}"
            ) from None
        shapes = [tuple(t.shape) for t in first] == [tuple(t.shape) for t in again]
        m = (
            self.compare(again, first, inputs, shape)
            if shapes and len(again) == len(first)
            else None
        )
        if not shapes or len(again) != len(first) or m is not None:
            diff = (
                f"{m.output} off by {m.error:.3g} at {list(m.index)}, {m.count} of {m.total} "
                "elements"
                if m is not None
                else "different outputs"
            )
            raise OpLoadError(
                f"{where}: {REFERENCE_FILE} is not a function of its inputs: run twice on the "
                f"first inputs ({shape.label}) it gave {diff} (dropout left on, a model in "
                f"train mode, an unseeded random op?); {KERNEL_FILE} was not checked"
            )

    # --- models / entry points -------------------------------------------------------------
    def init_inputs(self) -> list[Any]:
        init = getattr(self._modules["inputs"], "get_init_inputs", None)
        return seeded(lambda: list(init())) if callable(init) else []

    def build_candidate(self, model_cls: Callable[..., Any], device: str) -> Any:
        """A candidate's ModelNew, built right after torch.manual_seed(MODEL_SEED)."""
        return build_model(model_cls, self.init_inputs(), device)

    def _call_original(self, inputs: Mapping[str, Any], device: str) -> Any:
        args = [inputs[n] for n in self.arg_names]
        entry = self._original_entry(device)
        with torch.no_grad():
            return entry(*args)

    def _original_entry(self, device: str) -> Any:
        module = self._original_module()
        if self.entry == "kernel":
            return module.kernel
        return self.build_candidate(module.ModelNew, device)

    def _original_module(self) -> types.ModuleType:
        """kernel.py, imported from a real file (Triton's @jit reads its source)."""
        return self._modules["kernel"]

    def reference_callable(self, device: str) -> Any:
        if device not in self._ref_callables:
            if self.reference_kind == "original":
                self._ref_callables[device] = self._original_entry(device)
            elif self.reference_kind == "function":
                self._ref_callables[device] = self._modules["reference"].reference
            else:
                model_cls = self._modules["reference"].Model
                self._ref_callables[device] = build_model(model_cls, self.init_inputs(), device)
        return self._ref_callables[device]

    def reference_modules(self) -> tuple[types.ModuleType, ...]:
        """The modules whose entry the candidate must not call (the verifier's tripwire)."""
        if self.reference_kind == "original":
            return (self._original_module(),)
        return (self._modules["reference"],)

    # --- OpSpec ------------------------------------------------------------------------
    def make_inputs(self, shape: Shape, seed: int, device: str) -> dict[str, Any]:
        raw = draw(self._modules["inputs"], shape.label, seed, f"workspace {self.name}", device)
        moved = [v.to(device).contiguous() if isinstance(v, torch.Tensor) else v for v in raw]
        self._label_key[shape.label] = input_key(moved)
        if shape.label not in self.input_bytes:
            self.input_bytes[shape.label] = sum(
                v.numel() * v.element_size() for v in moved if isinstance(v, torch.Tensor)
            )
        return dict(zip(self.arg_names, moved, strict=True))

    def reference(self, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        args = [inputs[n] for n in self.arg_names]
        if self._timed and self._timed[0] == id(inputs):
            # the speed gate calls this back to back on the same inputs: the bare call,
            # so the reference's time is the kernel's, not this method's bookkeeping
            out = self._timed[1](*args)
            return out if isinstance(out, tuple) else (out,)
        fn = self.reference_callable(device_of(args))
        with torch.no_grad():
            outs = _as_tuple(fn(*args))
        if self.reference_kind == "original":  # a Triton kernel needs no autograd guard
            self._timed[:] = [id(inputs), fn]  # in place: the verifier watches attributes
        self._output_meta[input_key(args)] = tuple((tuple(t.shape), t.dtype) for t in outs)
        return outs

    def reference_hp(self, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        """float64 for a torch reference that runs in float64; the plain reference else
        (always for the original Triton kernel)."""
        if self.reference_kind == "original":
            return self.reference(inputs)
        args = [inputs[n] for n in self.arg_names]
        device = device_of(args)
        plain = self.reference(inputs)
        try:
            if device not in self._hp_callables:
                fn = self.reference_callable(device)
                if isinstance(fn, torch.nn.Module):
                    fn = copy.deepcopy(fn).double()
                self._hp_callables[device] = fn
            with torch.no_grad():
                hp = _as_tuple(self._hp_callables[device](*widened(args)))
            if [tuple(t.shape) for t in hp] != [tuple(t.shape) for t in plain]:
                return plain
            return hp
        except Exception:
            return plain

    def expected_outputs(self, shape: Shape) -> tuple[Layout, ...]:
        key = self._label_key.get(shape.label)
        if key is None or key not in self._output_meta:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            self._timed.clear()  # the full path: it records the output meta
            self.reference(self.make_inputs(shape, 0, device))
            key = self._label_key[shape.label]
        return self._output_meta[key]

    def compare(
        self, outputs: Outputs, expected_hp: Outputs, inputs: Mapping[str, Any], shape: Shape
    ) -> Mismatch | None:
        found = []
        for i, (out, ref) in enumerate(zip(outputs, expected_hp, strict=True)):
            name = self.output_names[i] if i < len(self.output_names) else f"output{i}"
            if out.dtype.is_floating_point:
                tol = WORKSPACE_TOL.get(out.dtype, WORKSPACE_TOL[torch.float32])
                found.append(_common.compare_floats(name, out, ref, tol))
            else:  # integer / bool outputs: exact
                found.append(_common.compare_floats(name, out, ref, Tolerance(0.0, 0.0)))
        return _common.worst(found)

    def bytes_moved(self, shape: Shape) -> int:
        key = self._label_key.get(shape.label)
        meta = self._output_meta.get(key, ()) if key is not None else ()
        out_bytes = sum(math.prod(s) * _common.element_size(d) for s, d in meta)
        return self.input_bytes.get(shape.label, 0) + out_bytes

    def flops(self, shape: Shape) -> FlopModel:
        return FlopModel(0.0, "fp32")  # unknown for an arbitrary kernel

    def largest_shape(self, device: str) -> Shape:
        """The suite entry with the most input bytes (where a profile is taken)."""
        shapes = self.shapes_for(device)
        for s in shapes:
            if s.label not in self.input_bytes:  # sizes only: drawn on the meta device
                raw = draw(self._modules["inputs"], s.label, 0, self.name, "meta")
                self.input_bytes[s.label] = sum(
                    v.numel() * v.element_size() for v in raw if isinstance(v, torch.Tensor)
                )
        return max(shapes, key=lambda s: self.input_bytes.get(s.label, 0))


def _positional_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )


def _as_tuple(result: Any) -> tuple[torch.Tensor, ...]:
    return as_tensors(result, "expected a tensor or a tuple of tensors")
