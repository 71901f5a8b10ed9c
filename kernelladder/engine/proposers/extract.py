"""Pull the candidate out of a model's reply and check it is worth verifying.

A reply must hold one complete Python file in a ```python block that parses, imports
triton and defines the op's entry point (`kernel(<the op's arguments>)`, or `ModelNew`
for KernelBench problems); a MOVE: line and an UNDO: line say what changed and how
costly it is to undo. Anything malformed raises a retryable ProposerError of one line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelladder.engine.protocols import ProposerError

UNDO_COSTS = ("low", "medium", "high")
_BLOCK = re.compile(r"```[ \t]*(python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_MOVE = re.compile(r"^[ \t>*_`#-]*MOVE[*_`]*\s*:\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
_UNDO = re.compile(
    r"^[ \t>*_`#-]*UNDO[*_`]*\s*:\s*[*_`]*(low|medium|high)\b[*_`]*[\s:;,.\-–—()]*(.*?)\s*$",
    re.MULTILINE | re.IGNORECASE,
)
_SIGNATURE = re.compile(r"kernel\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Extracted:
    source: str
    move: str
    undo_cost: str
    undo_reason: str


def arg_names(op: Mapping[str, Any]) -> tuple[str, ...]:
    """The op's argument names, from OpSpec.describe()'s signature "kernel(x, weight) -> y"."""
    names = op.get("arg_names")
    if isinstance(names, (list, tuple)) and names:
        return tuple(str(n) for n in names)
    m = _SIGNATURE.search(str(op.get("signature") or ""))
    if not m:
        return ()
    return tuple(a.strip().split(":")[0].strip() for a in m.group(1).split(",") if a.strip())


def is_kernelbench(op: Mapping[str, Any]) -> bool:
    return op.get("kind") == "kernelbench"


def extract_reply(text: str, op: Mapping[str, Any]) -> Extracted:
    source = _code_block(text)
    _validate(source, op)
    outside = _BLOCK.sub("", text)
    move_m = _MOVE.search(outside)
    undo_m = _UNDO.search(outside)
    move = _one_line(move_m.group(1)) if move_m else "(the reply gave no MOVE line)"
    if undo_m:
        undo = undo_m.group(1).lower()
        reason = _one_line(undo_m.group(2)) or f"the reply rated this move {undo}"
    else:
        # an unrated move may touch anything: it waits at the gate like the riskiest
        undo, reason = "high", "the reply gave no UNDO line"
    return Extracted(source=source, move=move, undo_cost=undo, undo_reason=reason)


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _code_block(text: str) -> str:
    blocks = list(_BLOCK.finditer(text or ""))
    if not blocks:
        raise ProposerError("the reply has no ```python code block", retryable=True)
    tagged = [b for b in blocks if b.group(1)]
    chosen = (tagged or blocks)[0]
    source = chosen.group(2).strip("\n") + "\n"
    if not source.strip():
        raise ProposerError("the reply's ```python block is empty", retryable=True)
    return source


def _validate(source: str, op: Mapping[str, Any]) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProposerError(
            f"the reply's code does not parse: line {exc.lineno}: {exc.msg}", retryable=True
        ) from None
    imports = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.add(node.module.split(".")[0])
    if "triton" not in imports:
        raise ProposerError("the reply's code does not import triton", retryable=True)
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if is_kernelbench(op):
        if not isinstance(top.get("ModelNew"), ast.ClassDef):
            raise ProposerError("the reply's code defines no class ModelNew", retryable=True)
        return
    fn = top.get("kernel")
    if not isinstance(fn, ast.FunctionDef):
        raise ProposerError("the reply's code defines no function kernel(...)", retryable=True)
    expected = arg_names(op)
    if not expected:
        return
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    required = len(positional) - len(fn.args.defaults)
    if positional[: len(expected)] != list(expected) or required > len(expected):
        raise ProposerError(
            f"kernel({', '.join(positional)}) does not take the op's arguments "
            f"({', '.join(expected)})",
            retryable=True,
        )
