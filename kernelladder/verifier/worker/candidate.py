"""Loading one candidate: a fresh module from its own file, removed again afterwards.

Triton's `@jit` reads the kernel's source through `inspect`, so the source must live in a
real file; tracebacks then point at it too. Each candidate gets a unique module name and
file in the worker's scratch directory, and is dropped from `sys.modules` (and from the
interpreter's rewrite cache) when its verdict is out.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kernelladder.ops.spec import OpSpec

_COUNTER = itertools.count(1)
DISPLAY_NAME = "candidate.py"


class LoadFailure(Exception):
    """The candidate could not be loaded; `detail` is one line, `trace` the evidence."""

    def __init__(self, detail: str, trace: str = ""):
        super().__init__(detail)
        self.detail = detail
        self.trace = trace


@dataclass
class LoadedCandidate:
    module: ModuleType
    module_name: str
    path: str
    call: Callable[..., Any]  # call(*inputs in the op's arg order) -> outputs


def describe_exception(exc: BaseException, path: str, limit: int = 12) -> tuple[str, str]:
    """(one line naming the error and the candidate line it came from, short traceback)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if frame.filename == path:
            where = f" (at {DISPLAY_NAME}:{frame.lineno}: {(frame.line or '').strip()[:80]})"
            break
    if isinstance(exc, SyntaxError) and exc.filename == path:
        where = f" (at {DISPLAY_NAME}:{exc.lineno})"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {message[:300]}{where}"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    lines = text.replace(path, DISPLAY_NAME).splitlines()
    return line, "\n".join(lines[-limit:])


def _signature_problem(fn: Callable[..., Any], names: Sequence[str]) -> str | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins and C callables: the call itself will tell
    params = list(sig.parameters.values())
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    has_varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    wanted = ", ".join(names)
    got = ", ".join(str(p) for p in params)
    if len(positional) < len(names) and not has_varargs:
        return f"kernel({got}) takes fewer arguments than kernel({wanted})"
    for p, name in zip(positional, names, strict=False):
        if p.name != name:
            return f"kernel({got}) does not match kernel({wanted}): argument {p.name!r} should be {name!r}"
    for p in positional[len(names) :]:
        if p.default is inspect.Parameter.empty:
            return f"kernel({got}) has extra required argument {p.name!r}"
    for p in params:
        if p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty:
            return f"kernel({got}) has required keyword-only argument {p.name!r}"
    return None


def load(
    source: str, spec: OpSpec, scratch_dir: str, device: str, source_hash: str
) -> LoadedCandidate:
    """Execute the candidate as a new module and find its entry point; LoadFailure if not."""
    name = f"kl_candidate_{next(_COUNTER)}_{source_hash[:10]}"
    path = os.path.join(scratch_dir, f"{name}.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    try:
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        line, trace = describe_exception(exc, path)
        raise LoadFailure(f"syntax error: {line}", trace) from None
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None:
        raise LoadFailure("cannot create a module for the candidate")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit/KeyboardInterrupt from a candidate are faults too
        unload(name)
        line, trace = describe_exception(exc, path)
        raise LoadFailure(f"import failed: {line}", trace) from None

    if spec.kind == "kernelbench" or getattr(spec, "entry", "") == "ModelNew":
        call = _kernelbench_entry(module, spec, device, path, name)
    else:
        fn = module.__dict__.get("kernel")
        if fn is None or not callable(fn):
            unload(name)
            raise LoadFailure(
                f"the candidate defines no callable kernel(...); expected {spec.signature}"
            )
        problem = _signature_problem(fn, spec.arg_names)
        if problem:
            unload(name)
            raise LoadFailure(f"signature: {problem}")
        call = fn
    return LoadedCandidate(module=module, module_name=name, path=path, call=call)


def _kernelbench_entry(module: ModuleType, spec: OpSpec, device: str, path: str, name: str) -> Any:
    cls = module.__dict__.get("ModelNew")
    if cls is None or not callable(cls):
        unload(name)
        raise LoadFailure("the candidate defines no ModelNew class (KernelBench format)")
    try:
        build = getattr(spec, "build_candidate", None)
        if build is not None:
            return build(cls, device)
        init_inputs = spec.init_inputs() if hasattr(spec, "init_inputs") else []  # type: ignore[attr-defined]
        model = cls(*init_inputs)
        if hasattr(model, "to"):
            model = model.to(device)
        return model
    except BaseException as exc:
        unload(name)
        line, trace = describe_exception(exc, path)
        raise LoadFailure(f"ModelNew(...) failed: {line}", trace) from None


def unload(module_name: str) -> None:
    """Forget a candidate module (and the Triton interpreter's rewrites of its kernels)."""
    sys.modules.pop(module_name, None)
    interp = sys.modules.get("triton.runtime.interpreter")
    cache = getattr(getattr(interp, "InterpretedFunction", None), "rewritten_fn", None)
    if isinstance(cache, dict):
        for fn in [f for f in cache if getattr(f, "__module__", None) == module_name]:
            cache.pop(fn, None)
