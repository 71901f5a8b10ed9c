"""The fence, checked while the candidate runs: Triton launches counted, torch ops recorded.

`install_launch_counter()` wraps Triton's launch entry points once per worker, before
any candidate is loaded: `JITFunction.run` (GPU) and `InterpretedFunction.run` (CPU
interpreter); autotuners and heuristics launch through them. Under `compile_only()`
(the pipelined verification's compile stage, compile_ahead.py) the same wrappers make
`JITFunction.run` a warm-up (compiled and loaded, not launched, not counted), the
interpreter run nothing, and `Autotuner.run` compile each config without benchmarking.
`FenceRecorder` is a TorchDispatchMode that records every aten op the candidate calls
outside a Triton launch (the interpreter copies tensors inside a launch, and an autotuner
benchmarks inside `_bench`; those are Triton's, not the candidate's).

For built-in ops torch may only allocate, fill with a constant, make views and copy
without changing dtype (`ALLOWED_ATEN`); any other op is compute outside Triton. For
KernelBench problems only the spec's forbidden ops (the reference's) are rejected.

An operator the candidate defined itself (`torch.library.custom_op`, `triton_op`, a
`Library` of a namespace of its own: one that did not exist before it loaded) is no
compute of its own: the recorder runs its kernel with the recorder still watching
(`run_own_op`), so what it does inside is judged like the rest of the call.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelladder.ops.spec import aten_name
from kernelladder.verifier.worker.integrity import TRUSTED

# Allocation, constant fill, views, metadata and same-dtype copies: no arithmetic.
ALLOWED_ATEN: frozenset[str] = frozenset(
    {
        # allocation and constant initialisation
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::zeros",
        "aten::zeros_like",
        "aten::new_zeros",
        "aten::zero_",
        "aten::fill_",
        "aten::full",
        "aten::full_like",
        "aten::new_full",
        "aten::resize_",
        # views and metadata
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::as_strided",
        "aten::t",
        "aten::transpose",
        "aten::permute",
        "aten::expand",
        "aten::expand_as",
        "aten::view_as",
        "aten::select",
        "aten::slice",
        "aten::narrow",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::flatten",
        "aten::unflatten",
        "aten::split",
        "aten::split_with_sizes",
        "aten::chunk",
        "aten::unbind",
        "aten::movedim",
        "aten::detach",
        "aten::alias",
        "aten::lift_fresh",
        "aten::is_contiguous",
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::_local_scalar_dense",
        "aten::record_stream",
        # copies that keep the dtype (layout only; dtype changes are checked below)
        "aten::clone",
        "aten::copy_",
        "aten::_to_copy",
        "aten::contiguous",
    }
)
_DTYPE_CHECKED = frozenset({"aten::copy_", "aten::_to_copy"})


@dataclass
class LaunchState:
    """Shared by the launch wrappers and the recorder (one per worker)."""

    launches: int = 0
    depth: int = 0  # >0 while inside a Triton launch or an autotuner's benchmark
    watch_streams: bool = False  # check each launch's stream (set during checked calls)
    expected_stream: Any = None  # the current CUDA stream at the start of the call
    side_stream_launches: int = 0
    thread: Any = None  # the worker's main thread; launches elsewhere count as side work
    other_thread_launches: int = 0
    installed: dict[str, str] = field(default_factory=dict)
    compile_only: bool = False  # compile_ahead.py: Triton compiles and launches nothing


STATE = LaunchState()


def _current_stream_handle() -> int | None:
    """The current CUDA stream's id, as torch._C says (None off CUDA)."""
    try:
        return int(TRUSTED.current_stream_ids(TRUSTED.current_device())[0])
    except Exception:
        return None


_BELOW_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)
_BACKEND_KEYS = frozenset({torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA})


def own_op(func: Any, known_namespaces: frozenset[str] | None) -> bool:
    """Whether `func` is an operator of a namespace the candidate made (one not among
    `known_namespaces`, those that existed before it loaded)."""
    if known_namespaces is None:
        return False
    return aten_name(func).split("::", 1)[0] not in known_namespaces


def run_own_op(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run the candidate's own operator's kernel with `mode` still active, so that the
    torch ops inside it reach `mode` too: the kernel is called from the first dispatch
    key below Python that has one for it (usually the backend's)."""
    keys = torch._C._dispatch_tls_local_include_set()
    for value in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(value, torch.Tensor):
            keys = keys | torch._C._dispatch_keys(value)
    keys = keys & _BELOW_PYTHON
    name = func.name()
    while True:
        key = keys.highestPriorityTypeId()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            if not torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(name, key):
                break
        elif key in _BACKEND_KEYS or key == torch._C.DispatchKey.Undefined:
            break
        keys = keys.remove(key)
    with mode:
        return func.redispatch(keys, *args, **kwargs)


@contextlib.contextmanager
def compile_only() -> Iterator[None]:
    """Triton compiles (and loads) what the candidate launches, and runs none of it:
    `JITFunction.run` as a warm-up, the interpreter not at all, an autotuner compiling
    each config without benchmarking (and without choosing one)."""
    STATE.compile_only = True
    try:
        yield
    finally:
        STATE.compile_only = False


def _compile_configs(autotuner: Any, args: tuple, kwargs: dict) -> None:
    """An autotuner's configs compiled, none benchmarked; its choice is left to the
    correctness gate's first real call."""
    kwargs = dict(kwargs)
    kwargs.pop("warmup", None)
    grid = kwargs.pop("grid", None)
    autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    try:
        configs = (
            autotuner.prune_configs(kwargs) if len(autotuner.configs) > 1 else autotuner.configs
        )
        for config in configs:
            autotuner.fn.run(*args, grid=grid, warmup=True, **kwargs, **config.all_kwargs())
    finally:
        autotuner.nargs = None


def _wrap_launch(original: Any, counts: bool, kind: str = "jit") -> Any:
    state = STATE

    def run(self, *args, **kwargs):
        if state.compile_only:
            if kind == "interpreter":
                return None  # the interpreter compiles nothing
            kwargs["warmup"] = True  # compiled and loaded, not launched
        if counts and not kwargs.get("warmup", False):
            state.launches += 1
            if state.thread is not None and threading.current_thread() is not state.thread:
                state.other_thread_launches += 1
            if (
                state.watch_streams
                and state.expected_stream is not None
                and _current_stream_handle() != state.expected_stream
            ):
                state.side_stream_launches += 1
        state.depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state.depth -= 1

    run.__wrapped__ = original  # type: ignore[attr-defined]
    run.__kl_launch_wrapper__ = True  # type: ignore[attr-defined]
    return run


def _wrap_autotuner_run(original: Any) -> Any:
    """Autotuner.run: itself outside compile-only mode (its launches and benchmarks go
    through the wrappers above); inside it, every config compiled and none benchmarked."""
    state = STATE

    def run(self, *args, **kwargs):
        if state.compile_only:
            return _compile_configs(self, args, kwargs)
        return original(self, *args, **kwargs)

    run.__wrapped__ = original  # type: ignore[attr-defined]
    run.__kl_launch_wrapper__ = True  # type: ignore[attr-defined]
    return run


def install_launch_counter() -> dict[str, str]:
    """Wrap Triton's launch paths (idempotent); returns {path: "wrapped" | why not}."""
    if STATE.installed:
        return dict(STATE.installed)
    STATE.thread = threading.current_thread()
    targets = [
        ("triton.runtime.jit", "JITFunction", "run", "jit"),
        ("triton.runtime.interpreter", "InterpretedFunction", "run", "interpreter"),
        ("triton.runtime.autotuner", "Autotuner", "_bench", "bench"),
        ("triton.runtime.autotuner", "Autotuner", "run", "autotuner"),
    ]
    import importlib

    for module_name, cls_name, attr, kind in targets:
        key = f"{cls_name}.{attr}"
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
            original = cls.__dict__[attr]
        except Exception as exc:
            STATE.installed[key] = f"absent ({type(exc).__name__})"
            continue
        if getattr(original, "__kl_launch_wrapper__", False):
            STATE.installed[key] = "wrapped"
            continue
        if kind == "autotuner":
            wrapped = _wrap_autotuner_run(original)
        else:
            wrapped = _wrap_launch(original, counts=kind != "bench", kind=kind)
        setattr(cls, attr, wrapped)
        STATE.installed[key] = "wrapped"
    return dict(STATE.installed)


def launch_wrappers_intact() -> bool:
    import importlib

    for module_name, cls_name, attr in (
        ("triton.runtime.jit", "JITFunction", "run"),
        ("triton.runtime.interpreter", "InterpretedFunction", "run"),
    ):
        if STATE.installed.get(f"{cls_name}.{attr}") != "wrapped":
            continue
        cls = getattr(importlib.import_module(module_name), cls_name)
        if not getattr(cls.__dict__.get(attr), "__kl_launch_wrapper__", False):
            return False
    return True


def _dtype_changing(name: str, args: tuple, kwargs: dict) -> bool:
    try:
        if name == "aten::copy_":
            dst, src = args[0], args[1]
            return isinstance(src, torch.Tensor) and dst.dtype != src.dtype
        if name == "aten::_to_copy":
            dtype = kwargs.get("dtype")
            return dtype is not None and dtype != args[0].dtype
    except Exception:
        return True
    return False


class FenceRecorder(TorchDispatchMode):
    """Records the aten ops called outside Triton launches while it is active."""

    def __init__(
        self,
        forbidden: frozenset[str],
        builtin: bool,
        known_namespaces: frozenset[str] | None = None,
    ):
        super().__init__()
        self.forbidden = forbidden
        self.builtin = builtin
        self.known_namespaces = known_namespaces  # the operators' namespaces before load
        self.calls: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if STATE.depth == 0:
            name = aten_name(func)
            self.calls[name] += 1
            if own_op(func, self.known_namespaces):
                return run_own_op(self, func, args, kwargs)
            if name in self.forbidden:
                self.violations[f"{name} (forbidden: reference or library op)"] += 1
            elif self.builtin:
                if name not in ALLOWED_ATEN:
                    self.violations[f"{name} (torch compute outside Triton)"] += 1
                elif name in _DTYPE_CHECKED and _dtype_changing(name, args, kwargs):
                    self.violations[f"{name} (dtype cast in torch)"] += 1
        return func(*args, **kwargs)

    def is_active(self) -> bool:
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            return any(mode is self for mode in _get_current_dispatch_mode_stack())
        except Exception:
            return True
