"""`tune`: steps the launch parameters of any Triton kernel. No key, no network.

It reads the parent's source (ast), finds each Triton launch's `tl.constexpr` keyword
arguments and launch options (BLOCK_*, num_warps, num_stages, and the values in an
autotune's triton.Config list) and proposes ONE step at a time: a power of two up or
down (num_stages: one up or down), as a low undo-cost move. Constraints: a block size
bound to a name is changed where the name is bound, so a grid computed from it changes
too; a literal block size also changes the same literal in the launch's grid.

One branch per parameter group (block sizes, warps, stages). The engine gives each
proposal the branch's best as parent, so the verifier steers: a step that passes and is
faster becomes the base of the next (the same step is tried again first), a failing or
slower one is not retried (a dead end). Every source it proposed is remembered run-wide,
so two branches on the same group never propose the same kernel. A profile (when the
context carries one) orders the moves: memory-bound -> larger blocks first; low
occupancy -> fewer warps first.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerError,
    ProposerExhausted,
)

NAME = "tune"
GROUPS = ("blocks", "warps", "stages")
UP, DOWN = 1, -1
LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # Triton's defaults on NVIDIA GPUs
TUNABLE_WORDS = ("BLOCK", "TILE", "ROWS", "GROUP", "SIZE", "SPLIT", "CHUNK", "VEC", "WARP")
BOUNDS = {"blocks": (1, 1 << 16), "warps": (1, 32), "stages": (1, 8)}
_SCALED = re.compile(r"^\((?P<base>.*)\) \* (?P<f>\d+)$")
_DIVIDED = re.compile(r"^max\(\((?P<base>.*)\) // (?P<f>\d+), 1\)$")


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] (absolute offsets) with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Knob:
    """One launch parameter of the source and where a step changes it."""

    key: str  # e.g. "_bias_gelu.BLOCK_N", "_kern.config0.BLOCK_M"
    name: str  # e.g. "BLOCK_N", "num_warps"
    group: str  # "blocks" | "warps" | "stages"
    value: int | None  # the literal value; None for an expression
    text: str  # the current value's source text
    span: tuple[int, int]  # where that text lies (absolute offsets); (p, p) to insert
    grid_spans: tuple[tuple[int, int], ...] = ()  # the same literal in the launch's grid
    insert: bool = False  # the launch option is absent: a step adds it

    def step(self, direction: int) -> tuple[str, list[Edit]] | None:
        """(new value text, edits) for one step, or None when out of bounds."""
        low, high = BOUNDS[self.group]
        if self.value is not None:
            if self.group == "stages":
                new = self.value + direction
            else:
                new = self.value * 2 if direction == UP else self.value // 2
            if not low <= new <= high or new == self.value:
                return None
            text = str(new)
        else:
            text = _scaled(self.text, direction, self.group)
        if self.insert:
            return text, [Edit(self.span[0], self.span[1], f", {self.name}={text}")]
        edits = [Edit(self.span[0], self.span[1], text)]
        edits += [Edit(a, b, text) for a, b in self.grid_spans]
        return text, edits


def group_of(name: str) -> str:
    if name == "num_warps":
        return "warps"
    if name == "num_stages":
        return "stages"
    return "blocks"


def _scaled(text: str, direction: int, group: str) -> str:
    """An expression stepped once: `(E) * 2`, `max((E) // 2, 1)` (stages: `(E) + 1`),
    folding an earlier step instead of nesting it."""
    if group == "stages":
        return f"max(({text}) - 1, 1)" if direction == DOWN else f"({text}) + 1"
    base, factor = text, 1.0
    if m := _SCALED.match(text):
        base, factor = m["base"], float(m["f"])
    elif m := _DIVIDED.match(text):
        base, factor = m["base"], 1.0 / float(m["f"])
    factor = factor * 2 if direction == UP else factor / 2
    if factor == 1:
        return base
    if factor > 1:
        return f"({base}) * {int(factor)}"
    return f"max(({base}) // {int(round(1 / factor))}, 1)"


# --- reading a source -----------------------------------------------------------------


class _Offsets:
    def __init__(self, source: str):
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.source = source

    def of(self, node: ast.AST) -> tuple[int, int]:
        start = self.starts[node.lineno - 1] + _char_col(
            self.source, self.starts[node.lineno - 1], node.col_offset
        )  # type: ignore[attr-defined]
        end_line = self.starts[node.end_lineno - 1]  # type: ignore[attr-defined]
        end = end_line + _char_col(self.source, end_line, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end


def _char_col(source: str, line_start: int, byte_col: int) -> int:
    """ast columns are UTF-8 byte offsets; the edits work on characters."""
    line_end = source.find("\n", line_start)
    line = source[line_start : line_end if line_end >= 0 else len(source)]
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit"
    )


def _is_autotune(decorator: ast.expr) -> bool:
    if not isinstance(decorator, ast.Call):
        return False
    f = decorator.func
    return (isinstance(f, ast.Attribute) and f.attr == "autotune") or (
        isinstance(f, ast.Name) and f.id == "autotune"
    )


def _constexpr_params(fn: ast.FunctionDef) -> set[str]:
    found = set()
    for arg in [*fn.args.args, *fn.args.kwonlyargs]:
        if arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation):
            found.add(arg.arg)
    return found


def _tunable(name: str, constexprs: set[str]) -> bool:
    """A constexpr that sizes work (BLOCK_N, ROWS, GROUP_M...), not one that states a fact
    of the inputs (HEAD_D, IS_CAUSAL)."""
    return name in constexprs and any(w in name.upper() for w in TUNABLE_WORDS)


def _int_constant(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def find_knobs(source: str) -> list[Knob]:
    """Every launch parameter tune can step, in source order; ProposerError when the
    source does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProposerError(f"tune: the source does not parse (line {exc.lineno})") from None
    off = _Offsets(source)
    jitted: dict[str, set[str]] = {}
    knobs: list[Knob] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            jitted[node.name] = _constexpr_params(node)
            for d in node.decorator_list:
                if _is_autotune(d):
                    knobs += _autotune_knobs(node.name, d, off)
    autotuned = {k.key.split(".")[0] for k in knobs}
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        if fn.name in jitted:
            continue
        bindings = _bindings(fn)
        for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
            if not isinstance(call.func, ast.Subscript):
                continue
            launched = call.func.value
            kname = launched.id if isinstance(launched, ast.Name) else ast.unparse(launched)
            if kname not in jitted:
                continue
            knobs += _launch_knobs(kname, jitted[kname], call, bindings, off, kname in autotuned)
    return knobs


def _bindings(fn: ast.FunctionDef) -> dict[str, list[ast.Assign]]:
    """name -> its plain assignments in the function (one target)."""
    found: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            found.setdefault(node.targets[0].id, []).append(node)
    return found


def _grid_nodes(call: ast.Call, bindings: Mapping[str, list[ast.Assign]]) -> list[ast.AST]:
    grid = call.func.slice  # type: ignore[attr-defined]
    nodes: list[ast.AST] = [grid]
    if isinstance(grid, ast.Name) and len(bindings.get(grid.id, ())) == 1:
        nodes.append(bindings[grid.id][0].value)
    return nodes


def _launch_knobs(
    kname: str,
    constexprs: set[str],
    call: ast.Call,
    bindings: Mapping[str, list[ast.Assign]],
    off: _Offsets,
    autotuned: bool,
) -> list[Knob]:
    knobs: list[Knob] = []
    given = set()
    for kw in call.keywords:
        if kw.arg is None or not (_tunable(kw.arg, constexprs) or kw.arg in LAUNCH_DEFAULTS):
            continue
        given.add(kw.arg)
        group = group_of(kw.arg)
        target: ast.AST = kw.value
        if isinstance(kw.value, ast.Name) and len(bindings.get(kw.value.id, ())) == 1:
            target = bindings[kw.value.id][0].value  # change it where it is bound: grid too
        value = _int_constant(target)
        grid_spans: tuple[tuple[int, int], ...] = ()
        if value is not None and target is kw.value and group == "blocks":
            grid_spans = tuple(
                off.of(n)
                for g in _grid_nodes(call, bindings)
                for n in ast.walk(g)
                if _int_constant(n) == value
            )
        knobs.append(
            Knob(
                key=f"{kname}.{kw.arg}",
                name=kw.arg,
                group=group,
                value=value,
                text=ast.get_source_segment(off.source, target) or ast.unparse(target),
                span=off.of(target),
                grid_spans=grid_spans,
            )
        )
    if not autotuned:  # an autotuned kernel takes num_warps/num_stages from its configs
        end = off.of(call)[1] - 1  # before the closing parenthesis
        while end > 0 and off.source[end - 1] in " \n\t,":
            end -= 1
        for option, default in LAUNCH_DEFAULTS.items():
            if option not in given:
                knobs.append(
                    Knob(
                        key=f"{kname}.{option}",
                        name=option,
                        group=group_of(option),
                        value=default,
                        text=str(default),
                        span=(end, end),
                        insert=True,
                    )
                )
    return knobs


def _autotune_knobs(kname: str, decorator: ast.Call, off: _Offsets) -> list[Knob]:
    knobs: list[Knob] = []
    configs = next((kw.value for kw in decorator.keywords if kw.arg == "configs"), None)
    if configs is None and decorator.args:
        configs = decorator.args[0]
    if not isinstance(configs, ast.List):
        return knobs
    for i, cfg in enumerate(configs.elts):
        if not isinstance(cfg, ast.Call):
            continue
        pairs: list[tuple[str, ast.AST]] = []
        if cfg.args and isinstance(cfg.args[0], ast.Dict):
            d = cfg.args[0]
            pairs += [
                (k.value, v)
                for k, v in zip(d.keys, d.values, strict=False)
                if isinstance(k, ast.Constant)
                and isinstance(k.value, str)
                and any(w in k.value.upper() for w in TUNABLE_WORDS)
            ]
        pairs += [(kw.arg, kw.value) for kw in cfg.keywords if kw.arg in LAUNCH_DEFAULTS]
        for name, node in pairs:
            value = _int_constant(node)
            if value is None:
                continue
            knobs.append(
                Knob(
                    key=f"{kname}.config{i}.{name}",
                    name=name,
                    group=group_of(name),
                    value=value,
                    text=str(value),
                    span=off.of(node),
                )
            )
    return knobs


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    out = source
    for e in sorted(set(edits), key=lambda e: e.start, reverse=True):
        out = out[: e.start] + e.text + out[e.end :]
    return out


# --- the proposer ---------------------------------------------------------------------


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass
class _Memory:
    tried: set[str] = field(default_factory=set)  # digests of every source proposed (run-wide)
    made_by: dict[str, tuple[str, int]] = field(default_factory=dict)  # digest -> (key, dir)


def profile_order(group: str, profile: Mapping[str, Any] | None) -> tuple[int, int]:
    """Directions to try first for a group, from a profile summary: a memory-bound kernel
    wants larger blocks (fewer programs, wider accesses); a kernel with low achieved
    occupancy wants fewer warps or fewer stages (fewer registers / less shared memory)."""
    if not profile:
        return (UP, DOWN)
    dram = profile.get("dram_pct") or 0.0
    sm = profile.get("sm_pct") or 0.0
    occupancy = profile.get("achieved_occupancy_pct")
    if group in ("warps", "stages") and occupancy is not None and occupancy < 30:
        return (DOWN, UP)
    if group == "blocks" and dram >= sm:
        return (UP, DOWN)
    if group == "blocks":
        return (DOWN, UP)
    return (UP, DOWN)


class TuneProposer(ProposerBase):
    name = NAME

    def __init__(self, **_: Any):
        self._memory = _Memory()

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        out = []
        for i in range(max(0, k)):
            round_, index = divmod(i, len(GROUPS))
            label = f"tune:{GROUPS[index]}"
            out.append(label if round_ == 0 else f"{label}#{round_ + 1}")
        return out

    async def propose(self, ctx: ProposalContext) -> Proposal:
        group = ctx.strategy.removeprefix("tune:").split("#")[0]
        if group not in GROUPS:
            group = GROUPS[0]
        source = ctx.parent_source
        mem = self._memory
        mem.tried.add(_digest(source))
        for h in ctx.history:  # what this branch tried before (a resumed run, too)
            if isinstance(h.get("source"), str):
                mem.tried.add(_digest(h["source"]))
        knobs = [k for k in find_knobs(source) if k.group == group]
        if not knobs:
            raise ProposerExhausted(f"tune: no {group} parameter in the kernel's Triton launches")
        profile = getattr(ctx, "profile", None)
        first, second = profile_order(group, profile)
        moves: list[tuple[Knob, int]] = []
        repeat = mem.made_by.get(_digest(source))  # the step that made the parent: again
        if repeat is not None:
            moves += [(k, repeat[1]) for k in knobs if k.key == repeat[0]]
        moves += [(k, d) for k in knobs for d in (first, second)]
        for knob, direction in moves:
            stepped = knob.step(direction)
            if stepped is None:
                continue
            text, edits = stepped
            candidate = apply_edits(source, edits)
            digest = _digest(candidate)
            if candidate == source or digest in mem.tried:
                continue
            mem.tried.add(digest)
            mem.made_by[digest] = (knob.key, direction)
            old = knob.text if not knob.insert else f"{knob.text} (default)"
            also = " (and in the grid)" if knob.grid_spans else ""
            return Proposal(
                source=candidate,
                strategy=ctx.strategy,
                move=f"{knob.key}: {old} -> {text}{also}",
                undo_cost="low",
                undo_reason="one launch parameter, one step",
                meta={
                    "family": f"tune:{group}",
                    "param": knob.key,
                    "from": knob.text,
                    "to": text,
                    "direction": "up" if direction == UP else "down",
                },
            )
        raise ProposerExhausted(
            f"tune: every one-step {group} move around the branch's best was tried"
        )
