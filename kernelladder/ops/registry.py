"""The built-in ops, one folder each, and how any op is found: by name, by a workspace
directory, by a KernelBench problem file, or from its wire form.

A built-in op is a folder kernelladder/ops/NAME/ holding spec.py (its OpSpec), start.py
(its starting candidate: Triton source the worker loads, never imported here) and, where
the built-in search knows the op, families.py (the search's kernel families and their
NOTES for the prompts). The folders are found, not listed: a new op is a new folder.

Importing this module imports no torch: an op's spec (torch) is imported when it is
asked for, its families (plain Python) when the search asks for them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kernelladder.ops.folders import start_path

if TYPE_CHECKING:
    from kernelladder.ops.family import Family
    from kernelladder.ops.spec import OpSpec


def _discover() -> dict[str, str]:
    """op name -> the name of the OpSpec in its spec.py, for every folder of the ops
    package that holds a spec.py, in the order their __init__.py's PLACE gives (a folder
    without one comes last, by name). The OpSpec is the folder's name in capitals
    (ops/softmax/spec.py defines SOFTMAX)."""
    import kernelladder.ops as package

    found = []
    for root in map(Path, package.__path__):
        for folder in sorted(root.iterdir()):
            if not (folder / "spec.py").is_file() or folder.name.startswith(("_", ".")):
                continue
            op = importlib.import_module(f"{__package__}.{folder.name}")
            found.append((getattr(op, "PLACE", 1000), folder.name))
    return {name: name.upper() for _, name in sorted(found)}


BUILTIN: dict[str, str] = _discover()
BUILTIN_OPS: tuple[str, ...] = tuple(BUILTIN)

__all__ = [
    "BUILTIN_OPS",
    "builtin_ops",
    "catalog",
    "get_op",
    "knowledge",
    "load_op",
    "op_from_wire",
    "op_to_wire",
    "read_text",
    "search_module",
    "start_path",
]


def __getattr__(name: str) -> Any:
    """OpLoadError and OpSpec, from spec.py on first use (it imports torch)."""
    if name in ("OpLoadError", "OpSpec"):
        from kernelladder.ops import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_op(name: str) -> OpSpec:
    """The built-in op called `name`."""
    from kernelladder.ops.spec import OpLoadError

    if name not in BUILTIN:
        raise OpLoadError(f"unknown op {name!r} (known: {', '.join(BUILTIN_OPS)})")
    return getattr(importlib.import_module(f"{__package__}.{name}.spec"), BUILTIN[name])


def builtin_ops() -> tuple[OpSpec, ...]:
    return tuple(get_op(name) for name in BUILTIN_OPS)


def load_op(name_or_path: str) -> OpSpec:
    """A built-in op name, a workspace directory (the user's kernel.py + inputs.py), or
    the path of a KernelBench-format problem file (*.py)."""
    from kernelladder.ops.spec import OpLoadError

    if name_or_path in BUILTIN:
        return get_op(name_or_path)
    if Path(name_or_path).is_dir():
        from kernelladder.ops.workspace import WorkspaceSpec

        return WorkspaceSpec.from_dir(name_or_path)
    if name_or_path.endswith(".py") or "/" in name_or_path or Path(name_or_path).is_file():
        source = read_text(name_or_path, "problem file", OpLoadError)
        from kernelladder.ops.kernelbench import KernelBenchSpec

        return KernelBenchSpec.from_source(source, name=Path(name_or_path).name)
    return get_op(name_or_path)


def read_text(path: str, what: str, error: type[Exception]) -> str:
    """The UTF-8 text of the file at `path` (a problem file, a kernel file); `error` with
    one line naming it as `what` when it is missing or cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from None


def op_to_wire(op: OpSpec) -> Any:
    """The protocol's OP form: a built-in name, or {"kernelbench": source, "name": name}."""
    if op.kind == "kernelbench":
        return {"kernelbench": op.source, "name": op.name}  # type: ignore[attr-defined]
    if op.kind == "workspace":
        return op.files.to_wire()  # type: ignore[attr-defined]
    return op.name


def op_from_wire(op: Any) -> OpSpec:
    """The OpSpec for the protocol's OP field (see verifier/contract/protocol.py)."""
    from kernelladder.ops.spec import OpLoadError

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


def search_module(name: str) -> ModuleType | None:
    """The built-in op's families.py (FAMILIES, NOTES); None for an op without one."""
    if name not in BUILTIN:
        return None
    module = f"{__package__}.{name}.families"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None


def catalog() -> dict[str, tuple[Family, ...]]:
    """op name -> its search families, most promising first (the order of `strategies`)."""
    modules = {name: search_module(name) for name in BUILTIN_OPS}
    return {name: tuple(m.FAMILIES) for name, m in modules.items() if m is not None}


def knowledge(op: str) -> str:
    """What the built-in search knows of an op's kernels, for the api/code prompts: its
    families in search order (parameters, start values in brackets) and its template's
    NOTES; "" for an op whose template module keeps no NOTES."""
    from kernelladder.ops.family import family_lines

    module = search_module(op)
    if module is None:
        return ""
    notes = str(getattr(module, "NOTES", "") or "").strip()
    if not notes:
        return ""
    lines = ["The built-in search's kernel families for this op, in its order:"]
    for family in getattr(module, "FAMILIES", ()):
        lines += family_lines(family)
    return "\n".join(lines) + "\n\n" + notes
