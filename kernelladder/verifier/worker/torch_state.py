"""Torch's global state, below the attributes integrity.py watches: what a candidate could
change so that the reference, the baselines, the comparisons or the timer compute
differently, and that no attribute of torch's modules shows.

- the dispatcher: every operator's kernels, per dispatch key, as the dispatcher itself
  lists them (`torch._C._dispatch_dump`), the backend fallbacks, and the operators and
  namespaces that exist; Python-side tables the Python dispatcher reads (an operator's
  `py_kernels`, a higher-order operator's tables) and torch.ops' cached operators;
- the switches that choose what a kernel runs (torch_switches.SWITCHES: SDPA's backends,
  TF32, deterministic algorithms, the default dtype, grad and autocast modes...) and the
  plain flags of torch.backends' modules;
- every torch config module (dynamo's, inductor's, functorch's...) and Triton's knobs
  (its launch hooks among them);
- torch's function tables: the __torch_function__ and __torch_dispatch__ mode stacks, the
  infrastructure modes, the thread-local dispatch key sets.

`take()` records it; `changes()` says what differs, one line each
("torch.backends.cudnn.enabled: True -> False", "aten::rsqrt: a CPU kernel registered at
candidate.py:12"), at one of three depths: CHEAP (after every call: the switches,
configs, knobs, modes, fallbacks and the registration log; about 1 ms), END (that, the
dispatch entries of the operators the judgement itself runs on, `JUDGE_OPS`, the
operators and namespaces that exist and the shared libraries loaded, since a library's
static registrations pass no log; a few ms), FULL (that, and every operator's dispatch
entry, some 3,600 of them, the Python dispatcher's tables and torch.ops' caches; about
50 ms). END goes FULL by itself where it finds anything, or a library loaded since. Operators a candidate
defines in a namespace of its own are no change: they are its own
(`Changes.own_namespaces`). Every value is read through functions captured when this
module was imported (before any candidate), and compared without calling a method of an
object the candidate could have made (its __eq__, __repr__ or __deepcopy__ would run its
code inside the audit).

What torch.library registers while a candidate runs is noted as it happens by the log
in registration_log.py (`changes()` names it); a candidate that goes around the log is
still caught by the dispatcher's own listing.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.verifier.worker.registration_log import Registration
from kernelladder.verifier.worker.torch_switches import SWITCHES
from kernelladder.verifier.worker.torch_switches import read_switches as _read_switches

_C = torch._C
_DUMP = _C._dispatch_dump
_ALL_OPS = _C._dispatch_get_all_op_names
_HAS_FALLBACK = _C._dispatch_has_backend_fallback
_TLS_INCLUDE = _C._dispatch_tls_local_include_set
_TLS_EXCLUDE = _C._dispatch_tls_local_exclude_set
_LEN_FUNCTION_STACK = _C._len_torch_function_stack
_FUNCTION_STACK_AT = _C._get_function_stack_at
_LEN_DISPATCH_STACK = _C._len_torch_dispatch_stack
_DISPATCH_STACK_AT = _C._get_dispatch_stack_at
_GET_DISPATCH_MODE = getattr(_C, "_get_dispatch_mode", None)
_MODE_KEYS = tuple(getattr(_C, "_TorchDispatchModeKey", {}).__members__.values())


def _answering_keys() -> tuple[Any, ...]:
    """The dispatch keys that can hold a backend fallback (the others raise when asked)."""
    keys = []
    for key in _C.DispatchKey.__members__.values():
        try:
            _HAS_FALLBACK(key)
        except Exception:
            continue
        keys.append((key, key.name))
    return tuple(keys)


_DISPATCH_KEYS = _answering_keys()
_OP_NAMESPACE = torch._ops._OpNamespace
_OPS = torch.ops
_CONTEXT_VAR_GET = ContextVar.get
_GETATTR = getattr
_VARS = vars
_ISINSTANCE = isinstance
_TYPE = type
_PLAIN = (bool, int, float, complex, str, bytes, type(None))

# the types whose own comparison may be used: torch's (C) types of the switches' values
_C_VALUE_TYPES = frozenset(
    {torch.dtype, torch.device}
    | {type(getter(*args)) for _label, getter, args, asks_cuda in SWITCHES if not asks_cuda}
) - frozenset(_PLAIN)

# The operators the judgement itself runs between two calls of a candidate: the
# comparison of every op (a pass and a failure), the digests of outputs and of the
# reference, the bitwise comparison of inputs. A kernel registered for one of them could
# make a wrong output pass: they are checked as the trials end and as the verification
# ends (registrations through torch.library are named as they are made, after any call);
# every operator before a baseline is timed and as a verification that timed ends.
# tests/verifier/test_torch_state.py holds this list to what the profiler sees.
_JUDGE_OP_NAMES = """
    __and__ __or__ _local_scalar_dense _to_copy abs abs_ add add_ arange argmax as_strided
    bitwise_and bitwise_not bitwise_or cat clone copy_ detach detach_ div empty empty_like
    empty_strided eq equal fill_ floor floor_divide full_like gt is_same_size isfinite
    isnan item le lift_fresh mul mul_ ne new_empty new_zeros remainder reshape resize_
    select slice sub sum to unbind unsqueeze view where zero_ unravel_index _unsafe_view
    alias contiguous stack resolve_conj resolve_neg
"""
JUDGE_OPS = frozenset("aten::" + name for name in _JUDGE_OP_NAMES.split())


def same(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether `a` and `b` are the same value, without running either's own code: plain
    values by value, containers of them element by element, anything else by identity
    (and torch's C enums and dtypes by their C comparison)."""
    if a is b:
        return True
    kind = _TYPE(a)
    if kind is not _TYPE(b) or depth > 6:
        return False
    if kind in _PLAIN:
        return a == b or (kind is float and a != a and b != b)
    if kind is list or kind is tuple:
        return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    if kind is dict:
        if len(a) != len(b) or not all(_TYPE(k) in _PLAIN for k in a):
            return False
        return all(k in b and same(v, b[k], depth + 1) for k, v in a.items())
    if kind is set or kind is frozenset:
        return all(_TYPE(x) in _PLAIN for x in a) and all(_TYPE(x) in _PLAIN for x in b) and a == b
    if kind in _C_VALUE_TYPES:  # dtypes, devices, torch's C enums: their C comparison
        try:
            return bool(a == b)
        except Exception:
            return False
    return False


def _shown(value: Any) -> str:
    """A value as a verdict shows it (plain values only; anything else by its type)."""
    kind = _TYPE(value)
    listed = kind in (list, tuple) and len(value) <= 8 and all(_TYPE(v) in _PLAIN for v in value)
    if kind in _PLAIN or kind is torch.dtype or listed:
        text = repr(value)
    elif kind in _C_VALUE_TYPES:
        text = str(_GETATTR(value, "name", None) or object.__repr__(value))
    else:
        text = f"<{_GETATTR(kind, '__qualname__', 'object')}>"
    return text if len(text) <= 80 else text[:77] + "..."


# --- the snapshot ------------------------------------------------------------------------
CHEAP, END, FULL = "cheap", "end", "full"


def _shared_objects() -> frozenset[bytes]:
    """The shared libraries mapped into this process (a C++ extension's static
    registrations of kernels go through no log: a new one sends the audit to FULL)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return frozenset()
    return frozenset(line.rsplit(b" ", 1)[-1] for line in lines if b".so" in line)


def _namespace_of(op: str) -> str:
    return op.split("::", 1)[0]


def _backend_modules() -> tuple[tuple[str, Any], ...]:
    return tuple(
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None and (name == "torch.backends" or name.startswith("torch.backends."))
    )


# module globals of torch.backends that torch fills in lazily (caches, not switches)
_LAZY_BACKEND_GLOBALS = frozenset({"_cusparselt", "TYPE_CHECKING"})


def _backend_flags(modules: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The plain values torch.backends' modules keep as module globals (flags a Python
    setter flips without a C getter: opt_einsum's, MHA's fast path...)."""
    flags: dict[str, Any] = {}
    for name, module in modules:
        try:
            space = _VARS(module)
        except TypeError:
            continue
        for key, value in list(space.items()):
            if key.startswith("__") or key in _LAZY_BACKEND_GLOBALS or _TYPE(value) not in _PLAIN:
                continue
            flags[f"{name}.{key}"] = value
    return flags


def _config_modules() -> tuple[tuple[str, Any], ...]:
    config_cls = _GETATTR(sys.modules.get("torch.utils._config_module"), "ConfigModule", None)
    if config_cls is None:
        return ()
    return tuple(
        (name, module)
        for name, module in list(sys.modules.items())
        if _ISINSTANCE(module, config_cls)
    )


def _config_values(module: Any) -> dict[str, Any]:
    """Each entry's value as the module would answer it, read from its entries (reading
    through the module would copy mutable defaults into overrides as it goes)."""
    unset = _GETATTR(sys.modules.get("torch.utils._config_module"), "_UNSET_SENTINEL", None)
    entries = _VARS(module).get("_config")
    if not _ISINSTANCE(entries, dict):
        return {"<the module's entries>": entries}
    values: dict[str, Any] = {}
    for name, entry in list(entries.items()):
        try:
            space = _VARS(entry)
            value = space.get("env_value_force", unset)
            if value is unset:
                override = space.get("user_override")
                value = override.get() if override is not None else unset
            if value is unset:
                value = space.get("env_value_default", unset)
            if value is unset:
                value = space.get("default")
            values[name] = value
        except Exception:
            values[name] = "<unreadable>"
    return values


def _configs(modules: Iterable[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: _config_values(module) for name, module in modules}


def _override_vars(modules: Iterable[tuple[str, Any]]) -> tuple[Any, ...]:
    """Every config entry's override (a ContextVar: what setting a config sets)."""
    found = []
    for _name, module in modules:
        entries = _VARS(module).get("_config")
        if not _ISINSTANCE(entries, dict):
            continue
        for entry in list(entries.values()):
            override = _GETATTR(entry, "__dict__", {}).get("user_override")
            if _ISINSTANCE(override, ContextVar):
                found.append(override)
    return tuple(found)


def _overrides_unchanged(before: StateSnapshot) -> bool:
    """Every config override still holds the very object it held (the quick look after
    each call; where one does not, the configs are compared value by value)."""
    now = tuple(map(_CONTEXT_VAR_GET, before.config_vars))
    return len(now) == len(before.config_var_values) and all(
        map(operator.is_, now, before.config_var_values)
    )


def _triton_knobs() -> dict[str, Any]:
    """Triton's knobs: what each group holds (launch hooks, overrides), read as stored."""
    knobs = sys.modules.get("triton.knobs")
    if knobs is None:
        return {}
    base = _GETATTR(knobs, "base_knobs", None)
    out: dict[str, Any] = {}
    for group, obj in list(_VARS(knobs).items()):
        if base is None or not _ISINSTANCE(obj, base):
            continue
        out[f"triton.knobs.{group}"] = obj  # the group itself (replaced?)
        for key, value in list(_VARS(obj).items()):
            out[f"triton.knobs.{group}.{key}"] = value
        for key, value in list(_VARS(_TYPE(obj)).items()):
            if not key.startswith("_") and not callable(_GETATTR(value, "__get__", None)):
                out[f"triton.knobs.{group}.{key} (default)"] = value
    driver = sys.modules.get("triton.runtime.driver")
    config = _GETATTR(driver, "driver", None) if driver is not None else None
    if config is not None:
        try:
            out["triton.runtime.driver.active"] = _VARS(config).get("_active")
        except TypeError:
            pass
    return out


def _modes() -> dict[str, Any]:
    """The mode stacks (identities) and the thread's dispatch key sets."""
    out: dict[str, Any] = {
        "__torch_function__ modes": tuple(
            _FUNCTION_STACK_AT(i) for i in range(_LEN_FUNCTION_STACK())
        ),
        "__torch_dispatch__ modes": tuple(
            _DISPATCH_STACK_AT(i) for i in range(_LEN_DISPATCH_STACK())
        ),
        "dispatch keys included on this thread": str(_TLS_INCLUDE()),
        "dispatch keys excluded on this thread": str(_TLS_EXCLUDE()),
    }
    if _GET_DISPATCH_MODE is not None:
        for key in _MODE_KEYS:
            try:
                out[f"torch's {key.name.lower()} mode"] = _GET_DISPATCH_MODE(key)
            except Exception:
                pass
    return out


def _fallbacks() -> frozenset[str]:
    return frozenset(name for key, name in _DISPATCH_KEYS if _HAS_FALLBACK(key))


def _dumps(names: Iterable[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = _DUMP(name)
        except Exception as exc:
            out[name] = f"<unreadable: {_TYPE(exc).__name__}>"
    return out


def _op_tables() -> dict[int, tuple[str, Any, tuple[Any, ...]]]:
    """Every operator object torch has made so far (torch.ops' cached packets and
    overloads, the higher-order operators) with what the Python dispatcher reads from
    it: its py_kernels, python_key_table and functorch_table (identities)."""
    ops_mod = sys.modules.get("torch._ops")
    base = _GETATTR(ops_mod, "OperatorBase", None)
    packet_cls = _GETATTR(ops_mod, "OpOverloadPacket", None)
    if base is None:
        return {}
    found: dict[int, tuple[str, Any, tuple[Any, ...]]] = {}

    def note(label: str, op: Any) -> None:
        try:
            space = _VARS(op)
            tables = tuple(
                tuple(space.get(table, {}).items())
                for table in ("py_kernels", "python_key_table", "functorch_table")
            )
            found[id(op)] = (label, op, tables)
        except Exception:
            pass

    for name, hop in list((_GETATTR(ops_mod, "_higher_order_ops", {}) or {}).items()):
        if _ISINSTANCE(hop, base):
            note(f"higher-order operator {name}", hop)
    for ns_name, namespace in list(_VARS(_OPS).items()):
        if not _ISINSTANCE(namespace, _OP_NAMESPACE):
            continue
        for name, packet in list(_VARS(namespace).items()):
            if packet_cls is None or not _ISINSTANCE(packet, packet_cls):
                continue
            for overload_name, overload in list(_VARS(packet).items()):
                if _ISINSTANCE(overload, base):
                    note(f"torch.ops.{ns_name}.{name}.{overload_name}", overload)
    return found


def _ops_caches() -> dict[str, Any]:
    """torch.ops' namespaces and the packets they cached (identities)."""
    out: dict[str, Any] = {}
    for ns_name, namespace in list(_VARS(_OPS).items()):
        if ns_name.startswith("__"):
            continue
        out[f"torch.ops.{ns_name}"] = namespace
        if _ISINSTANCE(namespace, _OP_NAMESPACE):
            for name, packet in list(_VARS(namespace).items()):
                if not name.startswith("__"):
                    out[f"torch.ops.{ns_name}.{name}"] = packet
    return out


@dataclass
class StateSnapshot:
    """Torch's global state at one moment (`full`: with every operator's entry). Its
    shared libraries grow with those a FULL audit found harmless (changes())."""

    full: bool
    backend_modules: tuple[tuple[str, Any], ...]  # torch.backends' modules
    config_modules: tuple[tuple[str, Any], ...]  # torch's config modules
    config_vars: tuple[Any, ...]  # their entries' overrides (ContextVars)
    config_var_values: tuple[Any, ...]  # what each held
    switches: dict[str, Any]
    backend_flags: dict[str, Any]
    configs: dict[str, dict[str, Any]]
    triton: dict[str, Any]
    modes: dict[str, Any]
    fallbacks: frozenset[str]
    namespaces: frozenset[str]
    operators: frozenset[str]  # every operator's name
    shared_objects: frozenset[bytes]
    judged: dict[str, str]  # JUDGE_OPS' overloads -> their dispatch entries
    ops: dict[str, str] = field(default_factory=dict)  # full: every operator's entry
    op_tables: dict[int, tuple[str, Any, tuple[Any, ...]]] = field(default_factory=dict)
    ops_caches: dict[str, Any] = field(default_factory=dict)


def take(full: bool = True) -> StateSnapshot:
    names = _ALL_OPS()
    judged = [n for n in names if n.split(".", 1)[0] in JUDGE_OPS]
    backends, configs = _backend_modules(), _config_modules()
    overrides = _override_vars(configs)
    snapshot = StateSnapshot(
        full=full,
        backend_modules=backends,
        config_modules=configs,
        switches=_read_switches(),
        backend_flags=_backend_flags(backends),
        configs=_configs(configs),
        config_vars=overrides,
        config_var_values=tuple(map(_CONTEXT_VAR_GET, overrides)),
        triton=_triton_knobs(),
        modes=_modes(),
        fallbacks=_fallbacks(),
        namespaces=frozenset(_namespace_of(n) for n in names),
        operators=frozenset(names),
        shared_objects=_shared_objects(),
        judged=_dumps(judged),
    )
    if full:
        snapshot.ops = _dumps(names)
        snapshot.op_tables = _op_tables()
        snapshot.ops_caches = _ops_caches()
    return snapshot


@dataclass
class Changes:
    """What differs from a snapshot: `problems` (each a line), and the namespaces of
    operators the candidate defined for itself (no problem; its worker retires)."""

    problems: list[str] = field(default_factory=list)
    own_namespaces: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.problems)


def _kernel_lines(dump: str) -> list[str]:
    """A dispatch entry's kernel lines ("CPU: registered at ... [ boxed ]")."""
    return [line for line in dump.splitlines() if ": registered at " in line and ":" in line]


def _describe_entry_change(op: str, before: str, after: str, rename: Mapping[str, str]) -> str:
    old = set(_kernel_lines(before))
    new = [line for line in _kernel_lines(after) if line not in old]
    gone = [line for line in _kernel_lines(before) if line not in set(_kernel_lines(after))]
    if new:
        line = new[0]
        key = line.split(":", 1)[0].replace(" (inactive)", "")
        where = line.split(" registered at ", 1)[1].split(" :: ")[0].split(" [")[0]
        for path, shown in rename.items():
            where = where.replace(path, shown)
        return f"{op}: a {key} kernel registered at {where}"
    if gone:
        key = gone[0].split(":", 1)[0]
        return f"{op}: its {key} kernel removed"
    return f"{op}: its dispatch entry changed"


def _compare_dict(label: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    found = []
    for key, value in before.items():
        if key not in after:
            found.append(f"{label}{key} removed")
        elif not same(value, after[key]):
            found.append(f"{label}{key}: {_shown(value)} -> {_shown(after[key])}")
    for key in after:
        if key not in before:
            found.append(f"{label}{key} set to {_shown(after[key])}")
    return found


def changes(
    before: StateSnapshot,
    level: str = CHEAP,
    registrations: Iterable[Registration] = (),
    rename: Mapping[str, str] | None = None,
) -> Changes:
    """What changed since `before`, at `level` (CHEAP, END or FULL: FULL needs a full
    `before`). `registrations`: what the registration log noted since; `rename` maps a
    path (the candidate's file) to how a verdict names it."""
    rename = dict(rename or {})
    out = Changes()
    problems = out.problems
    for entry in registrations:
        fallback = entry.method.startswith(("fallback", "register_ad"))
        if not fallback and _namespace_of(entry.op or entry.namespace) not in before.namespaces:
            continue  # an operator of the candidate's own namespace
        line = entry.describe()
        for path, shown in rename.items():
            line = line.replace(path, shown)
        problems.append("torch.library: " + line)
    problems += _compare_dict("", before.switches, _read_switches(before.switches))
    for name, module in before.backend_modules + before.config_modules:
        if sys.modules.get(name) is not module:
            problems.append(f"sys.modules[{name!r}] replaced")
    problems += _compare_dict("", before.backend_flags, _backend_flags(before.backend_modules))
    if level != CHEAP or not _overrides_unchanged(before):
        configs = _configs(before.config_modules)
        for module, values in before.configs.items():
            problems += _compare_dict(f"{module}.", values, configs.get(module, {}))
    problems += _compare_dict("", before.triton, _triton_knobs())
    modes = _modes()
    for key, value in before.modes.items():
        now = modes.get(key)
        if not same(value, now):
            if _TYPE(value) is tuple:
                problems.append(f"{key}: {len(value)} on the stack -> {len(now or ())}")
            else:
                problems.append(f"{key}: {_shown(value)} -> {_shown(now)}")
    fallbacks = _fallbacks()
    for key in sorted(fallbacks - before.fallbacks):
        problems.append(f"a backend fallback registered for {key}")
    for key in sorted(before.fallbacks - fallbacks):
        problems.append(f"the backend fallback for {key} removed")
    if level == CHEAP:
        return _unique(out)
    judged = _dumps(before.judged)
    for op, dump in before.judged.items():
        if judged[op] != dump:
            problems.append(_describe_entry_change(op, dump, judged[op], rename))
    names = _ALL_OPS()
    out.own_namespaces = {_namespace_of(n) for n in names} - before.namespaces
    for op in sorted(set(names) - before.operators):
        if _namespace_of(op) not in out.own_namespaces:
            problems.append(f"{op} defined in torch's namespace {_namespace_of(op)}")
    for op in sorted(before.operators - set(names)):
        problems.append(f"{op} removed from the dispatcher")
    loaded = _shared_objects() - before.shared_objects
    if level == END and not problems and not loaded:
        return _unique(out)
    if before.full:
        problems += _full_changes(before, rename)
        if not problems:  # libraries loaded since that registered nothing (Triton's
            before.shared_objects |= loaded  # launchers, cuBLAS): not looked at again
    return _unique(out)


def _unique(out: Changes) -> Changes:
    seen: set[str] = set()
    out.problems = [p for p in out.problems if not (p in seen or seen.add(p))]
    return out


def _full_changes(before: StateSnapshot, rename: Mapping[str, str]) -> list[str]:
    problems = []
    for op, dump in before.ops.items():
        if op in before.judged:
            continue  # compared at every depth
        try:
            now = _DUMP(op)
        except Exception:
            continue  # removed: said above
        if now != dump:
            problems.append(_describe_entry_change(op, dump, now, rename))
    tables = _op_tables()
    for key, (label, op, old) in before.op_tables.items():
        entry = tables.get(key)
        if entry is None or entry[1] is not op:
            continue  # a cached object dropped (torch.ops' caches are the next check)
        for table, was, now in zip(
            ("py_kernels", "python_key_table", "functorch_table"), old, entry[2], strict=True
        ):
            if (
                len(was) != len(now)
                or not all(a[0] is b[0] or same(a[0], b[0]) for a, b in zip(was, now, strict=True))
                or not all(a[1] is b[1] for a, b in zip(was, now, strict=True))
            ):
                problems.append(f"{label}.{table} changed")
    for key, (label, _op, now) in tables.items():
        if key in before.op_tables:
            continue
        mine = [fn for table in now for _k, fn in table if not _from_torch(fn)]
        ns = label.split(".")[2] if label.startswith("torch.ops.") else ""
        if mine and ns in before.namespaces:
            problems.append(f"{label}: a Python kernel from outside torch")
    caches = _ops_caches()
    for key, value in before.ops_caches.items():
        if key in caches and caches[key] is not value:
            problems.append(f"{key} replaced")
    return problems


def _from_torch(fn: Any) -> bool:
    module = _GETATTR(fn, "__module__", None)
    if _TYPE(module) is not str:
        module = _GETATTR(_TYPE(fn), "__module__", "") or ""
    return _TYPE(module) is str and (module == "torch" or module.startswith("torch."))
