"""A workspace's files: their names, their texts as they travel to the verifier, reading
them from the directory (and knowledge/ for the prompts), and executing them as modules.

Imports torch only (through the shared helpers).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelladder.ops import _common
from kernelladder.ops.spec import OpLoadError
from kernelladder.ops.user_code import exec_source

KIND = "workspace"
KERNEL_FILE, INPUTS_FILE, REFERENCE_FILE = "kernel.py", "inputs.py", "reference.py"
HINTS_FILE, KNOWLEDGE_DIR = "HINTS.md", "knowledge"
KNOWLEDGE_BUDGET_CHARS = 24_000  # what the api/code proposers get of knowledge/, at most
KNOWLEDGE_SUFFIXES = (".md", ".txt", ".rst")


@dataclass(frozen=True)
class WorkspaceFiles:
    """The texts of a workspace, as they travel to the verifier."""

    name: str
    kernel: str
    inputs: str
    reference: str | None = None
    outputs: int = 1  # how many tensors the kernel returns (learnt by the load-time check)

    def to_wire(self) -> dict[str, Any]:
        body = {"kernel": self.kernel, "inputs": self.inputs, "reference": self.reference}
        return {KIND: {**body, "outputs": self.outputs}, "name": self.name}

    @classmethod
    def from_wire(cls, op: Mapping[str, Any]) -> WorkspaceFiles:
        body = op.get(KIND)
        if not isinstance(body, Mapping) or not isinstance(body.get("kernel"), str):
            raise OpLoadError("a workspace op needs {'workspace': {'kernel', 'inputs'}, 'name'}")
        ref = body.get("reference")
        return cls(
            name=str(op.get("name") or "workspace"),
            kernel=body["kernel"],
            inputs=str(body.get("inputs") or ""),
            reference=ref if isinstance(ref, str) else None,
            outputs=int(body.get("outputs") or 1),
        )


def read_file(path: Path, where: str, *, required: bool) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise OpLoadError(
                f"{where}: no {path.name} (the kernel to optimize: kernel(...) or ModelNew)"
            ) from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise OpLoadError(
            f"{where}: cannot read {path.name}: {_common.error_line(exc, 300)}"
        ) from None


def knowledge_text(path: str | Path, budget: int = KNOWLEDGE_BUDGET_CHARS) -> tuple[str, list[str]]:
    """DIR/knowledge/*.md|txt|rst joined, cut at `budget` characters, and each file's
    name with what of it was kept ("notes.md (1200 chars)", "paper.md (cut at 800 of
    30000)", "big.txt (left out: budget spent)")."""
    folder = Path(path) / KNOWLEDGE_DIR
    if not folder.is_dir():
        return "", []
    parts: list[str] = []
    listing: list[str] = []
    left = budget
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        if file.suffix.lower() not in KNOWLEDGE_SUFFIXES:
            listing.append(f"{rel} (left out: not text/markdown)")
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            listing.append(f"{rel} (left out: unreadable)")
            continue
        if left <= 0:
            listing.append(f"{rel} (left out: budget of {budget} chars spent)")
            continue
        kept = text[:left]
        left -= len(kept)
        parts.append(f"## {rel}\n{kept}")
        cut = f"cut at {len(kept)} of {len(text)}" if len(kept) < len(text) else f"{len(text)}"
        listing.append(f"{rel} ({cut} chars)")
    return "\n\n".join(parts), listing


_IMPORT_DIR: list[str] = []


def load_module(source: str, filename: str, where: str, role: str) -> types.ModuleType:
    """A workspace file executed as a fresh module, once per text (registered, so
    dataclasses and pickle work); kernel.py is imported from a real file, which Triton's
    @jit needs to read its source."""
    digest = hashlib.sha256(source.encode("utf-8", "replace")).hexdigest()[:12]
    module_name = f"kernelladder_workspace_{role}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]

    def failed(step: str, exc: BaseException) -> str:
        if step == "import":
            return f"{where}: {filename} failed to import: {_common.error_line(exc, 300)}"
        line = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        return f"{where}: {filename}: syntax error{line}: {_common.error_line(exc, 300)}"

    if role != "kernel":
        return exec_source(source, module_name, filename, failed)
    if not _IMPORT_DIR:
        _IMPORT_DIR.append(tempfile.mkdtemp(prefix="kernelladder-workspace-"))
    path = os.path.join(_IMPORT_DIR[0], f"{module_name}.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    try:
        compile(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:
        raise OpLoadError(failed("syntax", exc)) from None
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        raise OpLoadError(failed("import", exc)) from None
    return module


def interpreter_or_fail(where: str) -> None:
    """On the CPU the user's kernel runs in Triton's interpreter, which must be chosen
    before triton is imported."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if "triton" in sys.modules:
        raise OpLoadError(
            f"{where}: no GPU here and triton was imported without TRITON_INTERPRET=1; "
            "set TRITON_INTERPRET=1 to check the kernel on the CPU"
        )
    os.environ["TRITON_INTERPRET"] = "1"
