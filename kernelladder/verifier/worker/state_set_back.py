"""Torch's switches set back, and taken again, around the verifier's own work.

The audit (state_audit.py) charges a candidate with what changed in torch's state while
its code ran. What changes while only the verifier's own code runs (the reference, the
baselines, the comparison, the timer: torch sets some switches lazily, as SDPA picks its
backends' order at its first call on a Hopper GPU) is not the candidate's doing:

- before a candidate loads, such a change is taken into the state the audit compares
  against (`retake`), once the state was proven unchanged just before that work;
- after a candidate loaded, it is set back (`set_back`) to the value the clean state
  holds, so that the baselines and the reference are timed in that state whoever made
  the change (the verifier's own code, or code the candidate left behind to run later,
  from a finalizer or a signal handler); only what can be set back exactly is: the
  switches that choose how a kernel runs, torch.backends' flags and the config modules'
  entries (`SET_BACK`). A change to anything else (the dispatcher, the mode stacks, the
  default dtype, grad mode...) is not set back.

Every setter is bound here, at import, before any candidate (as torch_switches.py binds its
getters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from kernelladder.verifier.worker import torch_state
from kernelladder.verifier.worker.registration_log import REGISTRATIONS
from kernelladder.verifier.worker.torch_state import (
    _C,
    _CONTEXT_VAR_GET,
    _GETATTR,
    _TYPE,
    _VARS,
    FULL,
    StateSnapshot,
    _backend_flags,
    _backend_modules,
    _compare_dict,
    _config_modules,
    _configs,
    _fallbacks,
    _modes,
    _override_vars,
    _shown,
    _triton_knobs,
    same,
)
from kernelladder.verifier.worker.torch_switches import GETTERS, SWITCHES, read_switches

_CONTEXT_VAR_SET = ContextVar.set

# Switches that decide what a judgement computes rather than how fast a kernel runs:
# never set back (a change to one outside the candidate's calls stays a change).
_JUDGEMENT_SWITCHES = frozenset(
    {
        "torch.get_default_dtype()",
        "torch.get_default_device()",
        "torch.is_grad_enabled()",
        "torch.is_inference_mode_enabled()",
        "forward-mode AD",
        "autocast (any device)",
        "torch.is_anomaly_enabled()",
        "the autograd fallback mode",
        "__torch_function__ (torch._C._get_torch_function_state)",
        "__torch_function__ (torch._C._is_torch_function_enabled)",
        "__torch_function__ modes (torch._C._is_torch_function_mode_enabled)",
        "torch.cuda.get_sync_debug_mode()",
        "the current CUDA device",
    }
)
# getters whose setter is not named "_set_" + the rest
_SETTER_NAMES = {
    "_get_flash_sdp_enabled": "_set_sdp_use_flash",
    "_get_mem_efficient_sdp_enabled": "_set_sdp_use_mem_efficient",
    "_get_math_sdp_enabled": "_set_sdp_use_math",
    "_get_cudnn_sdp_enabled": "_set_sdp_use_cudnn",
    "_get_fa3_sdp_enabled": "_set_sdp_use_fa3",
    "_get_overrideable_sdp_enabled": "_set_sdp_use_overrideable",
    "_get_fp32_precision_getter": "_set_fp32_precision_setter",
    "get_num_threads": "set_num_threads",
}
_DETERMINISTIC = (
    "torch.are_deterministic_algorithms_enabled()",
    "torch.is_deterministic_algorithms_warn_only_enabled()",
)
_SET_DETERMINISTIC = _GETATTR(_C, "_set_deterministic_algorithms", None)


def _bind_setters() -> dict[str, Callable[[Any], None]]:
    """label -> a function setting that switch to a value, for the switches this build
    answers and that may be set back."""
    answering = {label for label, *_ in SWITCHES}
    setters: dict[str, Callable[[Any], None]] = {}
    for label, name, args in GETTERS:
        if label not in answering or label in _JUDGEMENT_SWITCHES or label in _DETERMINISTIC:
            continue
        setter = _GETATTR(_C, _SETTER_NAMES.get(name, name.replace("_get_", "_set_", 1)), None)
        if setter is None or setter is _GETATTR(_C, name, None):
            continue

        def put(value: Any, _setter: Any = setter, _args: tuple = args) -> None:
            # a pair of flags (allow, allow_splitk) goes back as two arguments
            _setter(*_args, *value) if _TYPE(value) is tuple else _setter(*_args, value)

        setters[label] = put
    return setters


SETTERS = _bind_setters()


def set_back(before: StateSnapshot) -> list[str]:
    """What differs from `before` among the switches that have a setter, torch.backends'
    flags and the config modules' entries, set to its value there; a line for each
    ("torch.backends.cuda.flash_sdp_enabled(): False -> True (set back)"). What cannot
    be set back is left as it is (torch_state.changes still names it)."""
    done: list[str] = []
    now = read_switches(before.switches)
    for label, value in before.switches.items():
        if label in now and not same(value, now[label]) and label in SETTERS:
            try:
                SETTERS[label](value)
            except Exception:
                continue
            done.append(f"{label}: {_shown(now[label])} -> {_shown(value)}")
    flipped = [
        lab for lab in _DETERMINISTIC if lab in now and not same(before.switches[lab], now[lab])
    ]
    if (
        flipped
        and _SET_DETERMINISTIC is not None
        and all(lab in before.switches for lab in _DETERMINISTIC)
    ):
        enabled, warn_only = (before.switches[lab] for lab in _DETERMINISTIC)
        try:
            _SET_DETERMINISTIC(enabled, warn_only=warn_only)
            done.append(f"torch.use_deterministic_algorithms({enabled!r}, warn_only={warn_only!r})")
        except Exception:
            pass
    modules = dict(before.backend_modules)
    flags = _backend_flags(before.backend_modules)
    for key, value in before.backend_flags.items():
        if key in flags and not same(value, flags[key]):
            module_name, _, attr = key.rpartition(".")
            try:
                _VARS(modules[module_name])[attr] = value
            except Exception:
                continue
            done.append(f"{key}: {_shown(flags[key])} -> {_shown(value)}")
    moved = [
        (var, value)
        for var, value in zip(before.config_vars, before.config_var_values, strict=True)
        if _CONTEXT_VAR_GET(var) is not value
    ]
    if moved:
        configs = _configs(before.config_modules)
        for var, value in moved:  # each override holds again the very object it held
            _CONTEXT_VAR_SET(var, value)
        for module, values in before.configs.items():
            done += _compare_dict(f"{module}.", configs.get(module, {}), values)
    return [line + " (set back)" for line in done]


def settle(
    before: StateSnapshot,
    level: str,
    *,
    full_if_bypassed: bool = False,
    timed: AbstractContextManager[Any] | None = None,
) -> tuple[list[str], list[str]] | None:
    """Torch's state against `before` where only the verifier's own code ran since it
    was taken (audited to `level`, in full where `full_if_bypassed` and torch.library's
    door to the dispatcher was replaced; the first read inside `timed`): None when
    nothing changed; else what was set back (set_back's lines) and what is left changed
    that cannot be set back."""
    intact = REGISTRATIONS.intact()
    first = FULL if full_if_bypassed and not intact else level
    with timed or contextlib.nullcontext():
        changes = torch_state.changes(before, first, registrations=REGISTRATIONS.take())
    if intact and not changes.problems:
        return None
    lines = set_back(before)
    left = [p for p in changes.problems if p.startswith("torch.library: ")]
    left += torch_state.changes(before, level).problems
    if not intact:
        left.insert(0, "torch.library's door to the dispatcher was replaced")
    return lines, left


def retake(before: StateSnapshot) -> StateSnapshot:
    """`before` with what a CHEAP audit reads taken again now (switches, flags, configs,
    Triton's knobs, modes, fallbacks); the dispatcher's entries, the operators and the
    shared libraries as `before` holds them. For after the verifier's own work, once an
    audit proved the state unchanged before it."""
    backends, configs = _backend_modules(), _config_modules()
    overrides = _override_vars(configs)
    return replace(
        before,
        backend_modules=backends,
        config_modules=configs,
        config_vars=overrides,
        config_var_values=tuple(map(_CONTEXT_VAR_GET, overrides)),
        switches=read_switches(),
        backend_flags=_backend_flags(backends),
        configs=_configs(configs),
        triton=_triton_knobs(),
        modes=_modes(),
        fallbacks=_fallbacks(),
    )
