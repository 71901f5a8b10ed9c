"""Pull the candidate out of a model's reply and check it is worth verifying.

A reply must hold one complete Python file in a ```python block that parses, imports
triton and defines the op's entry point (`kernel(<the op's arguments>)`, or `ModelNew`
for KernelBench problems); a MOVE: line and an UNDO: line say what changed and how
costly it is to undo. Anything malformed raises a retryable ProposerError of one line.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelladder.engine.protocols import Proposal, ProposalContext, ProposerError

UNDO_COSTS = ("low", "medium", "high")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*$")
_PYTHON_TAGS = frozenset({"python", "py", "python3"})
_MOVE = re.compile(r"^[ \t>*_`#-]*MOVE[*_`]*\s*:[*_`]*\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
_UNDO = re.compile(
    r"^[ \t>*_`#-]*UNDO[*_`]*\s*:[*_`]*\s*[*_`]*(low|medium|high)\b[*_`]*[\s:;,.\-–—()]*(.*?)\s*$",
    re.MULTILINE | re.IGNORECASE,
)
_SIGNATURE = re.compile(r"kernel\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Extracted:
    source: str
    move: str
    undo_cost: str
    undo_reason: str

    def proposal(self, ctx: ProposalContext, **answer: Any) -> Proposal:
        """The reply as a Proposal (the api, openai and code proposers' one way to make
        it), made from the parent the model was shown; `answer`: the model, its tokens
        and cost, meta and notice, as Proposal names them."""
        return Proposal(
            **dataclasses.asdict(self),
            strategy=ctx.strategy,
            base_attempt=ctx.parent_attempt,
            **answer,
        )


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
    """A candidate defines ModelNew: a KernelBench problem, or a workspace whose kernel
    is an nn.Module."""
    return op.get("kind") == "kernelbench" or op.get("entry") == "ModelNew"


def extract_reply(text: str, op: Mapping[str, Any]) -> Extracted:
    source = _code_block(text)
    _validate(source, op)
    outside = _prose(text)
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


@dataclass(frozen=True)
class _Block:
    tag: str
    body: str
    start: int  # line numbers of the fences, to cut the blocks out of the prose
    end: int


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks, line by line (an unclosed last block runs to the end)."""
    lines = (text or "").splitlines()
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, tag = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        blocks.append(_Block(tag, "\n".join(lines[i + 1 : j]), i, j))
        i = j + 1
    return blocks


def _prose(text: str) -> str:
    lines = (text or "").splitlines()
    for b in reversed(_blocks(text)):
        del lines[b.start : b.end + 1]
    return "\n".join(lines)


def _code_block(text: str) -> str:
    blocks = _blocks(text)
    chosen = next((b for b in blocks if b.tag in _PYTHON_TAGS), None)
    if chosen is None:
        chosen = next((b for b in blocks if not b.tag), None)
    if chosen is None:
        raise ProposerError("the reply has no ```python code block", retryable=True)
    source = chosen.body.strip("\n") + "\n"
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
