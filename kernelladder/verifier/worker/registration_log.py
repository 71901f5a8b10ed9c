"""torch.library's door to the dispatcher, watched: `torch._C._dispatch_library` (how every
Python registration gets its library handle) and the methods of the handle it returns
(define, impl, fallback...) are wrapped once per worker, before any candidate, so that
what a candidate registers while it loads or runs is noted as it is registered, with
the operator, the dispatch key and where the library was made. torch_state.changes()
judges the notes: an operator of the candidate's own namespace is no change, a kernel
for an operator outside it is. A candidate that goes around the log (a private
reference dug out of the wrappers' closures) registers unnoted; the dispatcher's own
listing, read by torch_state.py, still shows what it registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

_C = torch._C
_GETATTR = getattr
_TYPE = type

_HANDLE_METHODS = (
    "def_", "def_legacy", "def_name_t_t", "def_schema_t_t", "define", "fallback",
    "fallback_fallthrough", "impl", "impl_t_t", "impl_with_aoti_compile",
    "register_ad_inplace_or_view_fallback",
)  # fmt: skip


@dataclass
class Registration:
    """One registration made through torch.library's door while a candidate ran."""

    method: str  # "impl", "define", "fallback", ...
    namespace: str  # of the library handle
    op: str  # "ns::name[.overload]" ("" for a fallback)
    key: str  # dispatch key ("" where none)
    where: str  # file:line of the library's creation

    def describe(self) -> str:
        if self.method.startswith("fallback") or self.method.startswith("register_ad"):
            return f"a backend fallback registered for {self.key or 'every key'} ({self.where})"
        if self.method.startswith("def"):
            return f"{self.op} defined in torch's namespace {self.namespace} ({self.where})"
        return f"{self.op}: a {self.key or 'default'} kernel registered ({self.where})"


class RegistrationLog:
    """torch.library's door to the dispatcher, watched: each library handle made and each
    registration through one, noted while `armed` (a candidate loading or running)."""

    def __init__(self) -> None:
        self.armed = False
        self.entries: list[Registration] = []
        self._handles: dict[int, tuple[Any, str, str, str]] = {}  # id -> (handle, ns, key, at)
        self.installed = False

    def install(self) -> bool:
        """Wrap the door (once per worker, before any candidate); False where this torch
        has none of it."""
        if self.installed:
            return True
        module_cls = _GETATTR(_C, "_DispatchModule", None)
        library = _GETATTR(_C, "_dispatch_library", None)
        if module_cls is None or library is None:
            return False
        log = self

        def _dispatch_library(kind, ns, dispatch_key="", *rest):
            handle = library(kind, ns, dispatch_key, *rest)
            where = f"{rest[0]}:{rest[1]}" if len(rest) >= 2 else "?"
            if log.armed:
                log._handles[id(handle)] = (handle, str(ns), str(dispatch_key), where)
            return handle

        _dispatch_library.__kl_registration_log__ = True  # type: ignore[attr-defined]
        _C._dispatch_library = _dispatch_library
        for name in _HANDLE_METHODS:
            original = module_cls.__dict__.get(name)
            if original is None:
                continue
            try:
                setattr(module_cls, name, self._wrap(name, original))
            except (TypeError, AttributeError):
                continue
        self.installed = True
        return True

    def _wrap(self, method: str, original: Any) -> Any:
        log = self

        def registering(handle, *args, **kwargs):
            if log.armed:
                log._note(handle, method, args, kwargs)
            return original(handle, *args, **kwargs)

        registering.__kl_registration_log__ = True  # type: ignore[attr-defined]
        return registering

    def _note(self, handle: Any, method: str, args: tuple, kwargs: dict) -> None:
        try:
            _h, ns, lib_key, where = self._handles.get(id(handle), (None, "?", "", "?"))
            if _h is not handle:  # a handle made before arming, or one we never saw
                ns, lib_key, where = "?", "", "?"
            op, key = "", lib_key
            if method.startswith("fallback") or method.startswith("register_ad"):
                key = str(args[0]) if args and _TYPE(args[0]) is str else str(lib_key)
            elif method.startswith("def"):
                schema = str(args[0]) if args else ""
                name = schema.split("(")[0].strip()
                op = name if "::" in name else f"{ns}::{name}"
            else:
                name = str(args[0]) if args else ""
                op = name if "::" in name else f"{ns}::{name}"
                if len(args) > 1 and _TYPE(args[1]) is str:
                    key = args[1] or lib_key
            self.entries.append(Registration(method, ns, op, str(key), where))
        except Exception:
            self.entries.append(Registration(method, "?", "?", "?", "?"))

    def take(self) -> list[Registration]:
        entries, self.entries = self.entries, []
        return entries

    def intact(self) -> bool:
        """The door still goes through this log (a candidate may have put torch's back)."""
        if not self.installed:
            return True
        if not _GETATTR(_C._dispatch_library, "__kl_registration_log__", False):
            return False
        cls_dict = _C._DispatchModule.__dict__
        return all(
            _GETATTR(cls_dict.get(name), "__kl_registration_log__", False)
            for name in _HANDLE_METHODS
            if name in cls_dict
        )


REGISTRATIONS = RegistrationLog()
