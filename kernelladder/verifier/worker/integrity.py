"""Has the candidate altered the verifier? Identity snapshots of what the verdict relies on.

Before a candidate is loaded the worker records the identity of every callable in the
namespaces the verifier's timing, synchronisation and comparisons go through (time,
torch, torch.Tensor, torch.cuda and its Event, torch.testing, triton.testing, the
verifier's and the ops' own modules, the spec's class) plus the interpreter trace hooks;
after loading and after each call it compares. Names added later are ignored (torch adds
lazily); a replaced or removed callable is a violation. The verifier also keeps private
references captured at import (`TRUSTED`) and times and compares only through those, so
a patch cannot change a verdict before it is caught.
"""

from __future__ import annotations

import gc
import operator
import sys
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Trusted:
    """References captured when the worker starts; the verifier calls only these. The
    timer's are torch._C's own (its event and stream types are immutable C types, and
    their methods cannot be replaced), not torch.cuda's Python wrappers around them, whose
    module globals a candidate could rebind while a timing runs."""

    perf_counter: Any = time.perf_counter
    monotonic: Any = time.monotonic
    equal: Any = torch.equal
    isfinite: Any = torch.isfinite
    empty: Any = torch.empty
    empty_strided: Any = torch.empty_strided
    cuda_synchronize: Any = getattr(torch._C, "_cuda_synchronize", None)  # None: no CUDA
    cuda_sleep: Any = getattr(torch._C, "_cuda_sleep", None)
    # event = event_type(enable_timing=True); event_record(event, stream);
    # elapsed_time(start, end) in ms
    event_type: Any = getattr(torch._C, "_CudaEventBase", None)
    event_record: Any = getattr(getattr(torch._C, "_CudaEventBase", None), "record", None)
    elapsed_time: Any = getattr(getattr(torch._C, "_CudaEventBase", None), "elapsed_time", None)
    stream_type: Any = getattr(torch._C, "_CudaStreamBase", None)
    current_stream_ids: Any = getattr(torch._C, "_cuda_getCurrentStream", None)
    current_device: Any = getattr(torch._C, "_cuda_getDevice", None)
    tensor_clone: Any = torch.Tensor.clone
    tensor_copy_: Any = torch.Tensor.copy_
    data_ptr: Any = torch.Tensor.data_ptr

    def current_stream(self, device_index: int | None = None) -> Any:
        """The current CUDA stream of a device (the current one by default), as torch._C's
        stream type, made from torch._C's own answer."""
        index = self.current_device() if device_index is None else device_index
        stream_id, index, device_type = self.current_stream_ids(index)
        return self.stream_type(stream_id=stream_id, device_index=index, device_type=device_type)

    def cuda_event(self) -> Any:
        """A CUDA event that records its time."""
        return self.event_type(enable_timing=True)


TRUSTED = Trusted()

# Namespaces whose callables the verdict depends on.
_MODULE_NAMES = (
    "time",
    "builtins",
    "threading",
    "math",
    "operator",
    "statistics",
    "torch",
    "torch._C",
    "torch._ops",
    "torch.library",
    "torch.overrides",
    "torch.backends",
    "torch.backends.cuda",
    "torch.backends.cudnn",
    "torch.cuda",
    "torch.testing",
    "torch.nn.functional",
    "torch.utils._python_dispatch",
    "numpy",
    "triton",
    "triton.testing",
    "triton.runtime.jit",
    "triton.runtime.autotuner",
    "triton.runtime.driver",
)
_CLASS_PATHS = (
    ("torch", "Tensor"),
    ("torch.cuda", "Event"),
    ("torch.cuda", "Stream"),
    ("torch._C", "_DispatchModule"),
    ("torch._ops", "OperatorBase"),
    ("torch._ops", "OpOverload"),
    ("torch._ops", "OpOverloadPacket"),
    ("torch._ops", "HigherOrderOperator"),
    ("triton.runtime.jit", "JITFunction"),
    ("triton.runtime.jit", "KernelInterface"),
    ("triton.runtime.autotuner", "Autotuner"),
)
_DESCRIPTORS = (classmethod, staticmethod, property)


def _is_tracked(value: Any) -> bool:
    return callable(value) or isinstance(value, (types.ModuleType, *_DESCRIPTORS))


def _functions(value: Any) -> tuple[types.FunctionType, ...]:
    """The Python functions a tracked value runs (its code can be swapped in place:
    `f.__code__ = ...` keeps the function's identity)."""
    if isinstance(value, types.FunctionType):
        return (value,)
    if isinstance(value, (types.MethodType, classmethod, staticmethod)):
        inner = getattr(value, "__func__", None)
        return (inner,) if isinstance(inner, types.FunctionType) else ()
    if isinstance(value, property):
        return tuple(f for f in (value.fget, value.fset) if isinstance(f, types.FunctionType))
    return ()


_OWN_MODULES: list[Any] = [-1, ()]  # [len(sys.modules) when scanned, the names found]


def _own_module_names() -> tuple[str, ...]:
    """The verifier's and the ops' module names, scanned again only when a module was
    added or removed since (a scan of sys.modules costs milliseconds, a check runs per call)."""
    count = len(sys.modules)
    if _OWN_MODULES[0] != count:
        _OWN_MODULES[1] = tuple(
            name
            for name in list(sys.modules)
            if name.startswith(("kernelladder.verifier", "kernelladder.ops"))
        )
        _OWN_MODULES[0] = count
    return _OWN_MODULES[1]


def _namespaces(extra: Iterable[tuple[str, Any]]) -> list[tuple[str, dict]]:
    spaces: list[tuple[str, dict]] = []
    for name in _MODULE_NAMES:
        mod = sys.modules.get(name)
        if mod is not None:
            spaces.append((name, vars(mod)))
    for mod_name, cls_name in _CLASS_PATHS:
        mod = sys.modules.get(mod_name)
        cls = getattr(mod, cls_name, None) if mod is not None else None
        if isinstance(cls, type):
            spaces.append((f"{mod_name}.{cls_name}", vars(cls)))
    for name in _own_module_names():
        mod = sys.modules.get(name)
        if mod is not None:
            spaces.append((name, vars(mod)))
    for label, obj in extra:
        if isinstance(obj, type):
            for klass in obj.__mro__:
                if klass is not object:
                    spaces.append((f"{label}:{klass.__qualname__}", vars(klass)))
        elif hasattr(obj, "__dict__"):
            spaces.append((label, vars(obj)))
    return spaces


@dataclass(frozen=True)
class Snapshot:
    hooks: tuple[Any, ...]
    # per namespace: its tracked names, in order, and the objects they were bound to (held
    # here, so none is freed and its id reused while the snapshot lives)
    groups: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = field(default_factory=dict)
    # every tracked Python function, where it was found, and its code, defaults and
    # keyword defaults then
    functions: tuple[types.FunctionType, ...] = ()
    found_at: tuple[str, ...] = ()
    code: tuple[Any, ...] = ()
    defaults: tuple[Any, ...] = ()
    kwdefaults: tuple[Any, ...] = ()
    # everything the functions refer to (their code, defaults and keyword defaults among
    # it), as the garbage collector lists it: compared first, in one call (each read of
    # a function's __code__ or __defaults__ is an audit event the sandbox's hook hears)
    referents: list[Any] = field(default_factory=list)


def _hooks() -> tuple[Any, ...]:
    import threading

    return (
        sys.gettrace(),
        sys.getprofile(),
        getattr(threading, "gettrace", lambda: None)(),
        getattr(threading, "getprofile", lambda: None)(),
    )


def take(extra: Iterable[tuple[str, Any]] = ()) -> Snapshot:
    """Identities of every tracked callable now (`extra`: (label, object) to include)."""
    groups: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {}
    functions: dict[int, tuple[types.FunctionType, str]] = {}
    for space, namespace in _namespaces(list(extra)):
        names, objects = [], []
        for name, value in list(namespace.items()):
            if space.startswith(("kernelladder.", "spec")) or _is_tracked(value):
                names.append(name)
                objects.append(value)
                for fn in _functions(value):
                    functions.setdefault(id(fn), (fn, f"{space}.{name}"))
        groups[space] = (tuple(names), tuple(objects))
    fns = tuple(fn for fn, _where in functions.values())
    return Snapshot(
        _hooks(),
        groups,
        functions=fns,
        found_at=tuple(where for _fn, where in functions.values()),
        code=tuple(map(_CODE, fns)),
        defaults=tuple(map(_DEFAULTS, fns)),
        kwdefaults=tuple(map(_KWDEFAULTS, fns)),
        referents=_REFERENTS(*fns),
    )


_CODE = operator.attrgetter("__code__")
_REFERENTS = gc.get_referents
_DEFAULTS = operator.attrgetter("__defaults__")
_KWDEFAULTS = operator.attrgetter("__kwdefaults__")


def _unchanged(namespace: dict, names: tuple[str, ...], objects: tuple[Any, ...]) -> bool:
    """Every name still bound to the same object: looked up and compared by identity in C
    (no object's own __eq__ is asked); False on any doubt."""
    if not names:
        return True
    try:
        got = operator.itemgetter(*names)(namespace)
    except KeyError:
        return False
    if len(names) == 1:
        got = (got,)
    return all(map(operator.is_, got, objects))


def altered(before: Snapshot, extra: Iterable[tuple[str, Any]] = ()) -> list[str]:
    """What changed since `before`: "torch.allclose replaced", "sys.settrace set", ..."""
    now: dict[tuple[str, str], dict] = {}
    for space, namespace in _namespaces(list(extra)):
        now[(space, "")] = namespace
    found: list[str] = []
    spaces = {space: ns for (space, _), ns in now.items()}
    intact = {
        space
        for space, (names, objects) in before.groups.items()
        if space in spaces and _unchanged(spaces[space], names, objects)
    }
    for space, (names, objects) in before.groups.items():  # only the namespaces that changed
        if space in intact:
            continue
        namespace = spaces.get(space)
        if namespace is None:
            found.append(f"{space} removed")
            continue
        for name, obj in zip(names, objects, strict=True):
            if name not in namespace:
                found.append(f"{space}.{name} removed")
            elif namespace[name] is not obj:
                found.append(f"{space}.{name} replaced")
    fns = before.functions
    referents = _REFERENTS(*fns)
    if len(referents) != len(before.referents) or not all(
        map(operator.is_, referents, before.referents)
    ):  # something a function refers to moved: which, if anything that counts
        swapped = []
        for getter, then, what in (
            (_CODE, before.code, "code"),
            (_DEFAULTS, before.defaults, "default arguments"),
            (_KWDEFAULTS, before.kwdefaults, "keyword defaults"),
        ):
            if not all(map(operator.is_, map(getter, fns), then)):
                for fn, where, was in zip(fns, before.found_at, then, strict=True):
                    if getter(fn) is not was:
                        swapped.append(f"{where}: its {what} replaced")
        if not swapped:  # a __dict__ or annotations made lazily: the quick look's new basis
            before.referents[:] = referents
        found += swapped
    if _hooks() != before.hooks:
        found.append("a trace or profile hook was installed (sys.settrace/setprofile)")
    seen: set[str] = set()
    unique = [f for f in found if not (f in seen or seen.add(f))]
    return unique


def op_objects(spec: Any) -> tuple[tuple[str, Any], ...]:
    """The op's own objects guarded beside the verifier's (`extra` of take and altered):
    its spec, and the reference it is judged against (a workspace's reference modules,
    a KernelBench problem's module and its Model)."""
    extra: list[tuple[str, Any]] = [("spec", spec), ("spec-class", type(spec))]
    problem = getattr(spec, "module", None) if spec.kind == "kernelbench" else None
    if spec.kind == "workspace":
        for i, module in enumerate(spec.reference_modules()):
            extra.append((f"workspace-reference-{i}", module))
    if problem is not None:
        extra.append(("problem", problem))
        if isinstance(getattr(problem, "Model", None), type):
            extra.append(("problem-Model", problem.Model))
    return tuple(extra)
