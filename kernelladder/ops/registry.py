"""Look ops up by name, by KernelBench problem path, or by their wire form.

Imports torch only (through the op modules, loaded lazily).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kernelladder.ops.builtin_names import BUILTIN as _BUILTIN
from kernelladder.ops.builtin_names import BUILTIN_OPS
from kernelladder.ops.spec import OpLoadError, OpSpec

__all__ = [
    "BUILTIN_OPS",
    "OpLoadError",
    "builtin_ops",
    "get_op",
    "load_op",
    "op_from_wire",
    "op_to_wire",
]


def get_op(name: str) -> OpSpec:
    """The built-in op called `name`."""
    if name not in _BUILTIN:
        raise OpLoadError(f"unknown op {name!r} (known: {', '.join(BUILTIN_OPS)})")
    module, attr = _BUILTIN[name]
    return getattr(importlib.import_module(f"kernelladder.ops.{module}"), attr)


def builtin_ops() -> tuple[OpSpec, ...]:
    return tuple(get_op(name) for name in BUILTIN_OPS)


def load_op(name_or_path: str) -> OpSpec:
    """A built-in op name, a workspace directory (the user's kernel.py + inputs.py), or
    the path of a KernelBench-format problem file (*.py)."""
    if name_or_path in _BUILTIN:
        return get_op(name_or_path)
    if Path(name_or_path).is_dir():
        from kernelladder.ops.workspace import WorkspaceSpec

        return WorkspaceSpec.from_dir(name_or_path)
    if name_or_path.endswith(".py") or "/" in name_or_path or Path(name_or_path).is_file():
        path = Path(name_or_path)
        try:
            source = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise OpLoadError(f"problem file not found: {name_or_path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise OpLoadError(f"cannot read problem file {name_or_path}: {exc}") from None
        from kernelladder.ops.kernelbench import KernelBenchSpec

        return KernelBenchSpec.from_source(source, name=path.name)
    return get_op(name_or_path)


def op_to_wire(op: OpSpec) -> Any:
    """The protocol's OP form: a built-in name, or {"kernelbench": source, "name": name}."""
    if op.kind == "kernelbench":
        return {"kernelbench": op.source, "name": op.name}  # type: ignore[attr-defined]
    if op.kind == "workspace":
        return op.files.to_wire()  # type: ignore[attr-defined]
    return op.name


def op_from_wire(op: Any) -> OpSpec:
    """The OpSpec for the protocol's OP field (see verifier/contract/protocol.py)."""
    if isinstance(op, str):
        return get_op(op)
    if isinstance(op, dict) and isinstance(op.get("kernelbench"), str):
        from kernelladder.ops.kernelbench import KernelBenchSpec

        name = op.get("name") or "problem.py"
        return KernelBenchSpec.from_source(op["kernelbench"], name=str(name))
    if isinstance(op, dict) and isinstance(op.get("workspace"), dict):
        from kernelladder.ops.workspace import WorkspaceFiles, WorkspaceSpec

        return _cached_workspace(WorkspaceFiles.from_wire(op), WorkspaceSpec)
    raise OpLoadError("op must be a built-in name or {'kernelbench': source, 'name': name}")


_WORKSPACES: dict[Any, OpSpec] = {}


def _cached_workspace(files: Any, spec_cls: Any) -> OpSpec:
    """One spec per workspace per process: its modules, compiled kernels and the output
    shapes it learnt are reused by every candidate a worker verifies."""
    if files not in _WORKSPACES:
        _WORKSPACES[files] = spec_cls.from_files(files)
    return _WORKSPACES[files]
