"""The knobs of a Triton source, found by the role each value plays, never by its name.

A `tl.constexpr` integer launch argument is a TILE when the kernel sizes work with it:
in `tl.arange`, the shape of `tl.zeros`/`tl.full`/`tl.reshape`, a block pointer's or
tensor descriptor's `block_shape`, a loop's step or count, or when the launch's grid is
computed from it. Tiles that size `tl.dot` operands get their dot role (M, N or K, from
which operand tiles they reach). A constexpr that only reorders programs (used with
values derived from `tl.program_id`, GROUP_M-style) is a SWIZZLE. Launch options
(`num_warps`, `num_stages`, `num_ctas`, `maxnreg`) and every integer in an autotune
config list are knobs too. A knob's value is set where it is written: at the launch, or
where the launch's name for it is bound (so a grid computed from the name follows); a
value computed there (`triton.next_power_of_2(n)`, `4 if n < 2048 else 8`) is scaled
as a whole (x2, /2; num_stages +1, -1).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kernelladder.engine.protocols import ProposerError

LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # Triton's defaults on NVIDIA GPUs
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
TILE, SWIZZLE, WARPS, STAGES, CTAS, MAXNREG, VALUE = (
    "tile", "swizzle", "warps", "stages", "ctas", "maxnreg", "value",
)  # fmt: skip
OPTION_ROLE = {"num_warps": WARPS, "num_stages": STAGES, "num_ctas": CTAS, "maxnreg": MAXNREG}
_SHAPE_CALLS = {"zeros": 0, "full": 0, "empty": 0, "reshape": 1, "broadcast_to": 1, "view": 1}
_BLOCK_CALLS = ("make_block_ptr", "make_tensor_descriptor")
_RANGE_CALLS = ("range", "static_range")


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] (absolute offsets) with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class KernelRoles:
    """What a jitted kernel does with its constexprs."""

    name: str
    constexprs: frozenset[str]
    tiles: frozenset[str]  # size work
    pow2: frozenset[str]  # in tl.arange or a tensor shape: Triton needs powers of two
    swizzles: frozenset[str]  # reorder programs only
    dot: Mapping[str, str]  # tile -> "M" | "N" | "K"
    has_dot: bool
    has_loop: bool  # a non-static loop: num_stages pipelines it


@dataclass(frozen=True)
class Knob:
    """One value of the source the tuner may set, and where it is written."""

    key: str  # "_mm.BM", "_mm.num_warps", "_mm.config0.BLOCK_M"
    label: str  # what a move line calls it: "BM", "num_warps", "config0.BLOCK_M"
    kernel: str
    name: str
    role: str  # TILE | SWIZZLE | WARPS | STAGES | CTAS | MAXNREG | VALUE
    value: int
    spans: tuple[tuple[int, int], ...]  # where the value's text lies; () with insert_at
    insert_at: int | None = None  # an absent launch option: written at this offset
    pow2: bool = False
    dot: str | None = None  # "M" | "N" | "K" for a tile that sizes tl.dot operands
    scaled: str | None = None  # a value computed in the launch: this expression, scaled

    def text(self, value: int) -> str:
        """The source text for a value (a scaled knob's value is a step: x2 per step up,
        /2 per step down; num_stages +1/-1)."""
        if self.scaled is None:
            return str(value)
        e = self.scaled
        if value == 0:
            return e
        if self.role == STAGES:
            return f"({e}) + {value}" if value > 0 else f"max(({e}) - {-value}, 1)"
        return f"({e}) * {2**value}" if value > 0 else f"max(({e}) // {2**-value}, 1)"

    def show(self, value: int) -> str:
        """How a move line writes a value: 128, or x2 / /2 / +1 of a computed one."""
        if self.scaled is None:
            return str(value)
        if self.role == STAGES:
            return f"{value:+d}" if value else "as computed"
        return f"x{2**value}" if value >= 0 else f"/{2**-value}"

    def edits(self, value: int) -> list[Edit]:
        if value == self.value:
            return []
        if self.insert_at is not None:
            return [Edit(self.insert_at, self.insert_at, f", {self.name}={value}")]
        return [Edit(a, b, self.text(value)) for a, b in self.spans]


@dataclass
class Found:
    """The knobs of a source and the roles of its kernels."""

    knobs: list[Knob] = field(default_factory=list)
    kernels: dict[str, KernelRoles] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # why a launch value is not a knob


# --- reading a source -----------------------------------------------------------------


class _Offsets:
    def __init__(self, source: str):
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.source = source

    def _at(self, line: int, byte_col: int) -> int:
        start = self.starts[line - 1]
        end = self.source.find("\n", start)
        text = self.source[start : end if end >= 0 else len(self.source)]
        # ast columns are UTF-8 byte offsets; edits work on characters
        return start + len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def of(self, node: ast.AST) -> tuple[int, int]:
        return (
            self._at(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self._at(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )


def _attr_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _call_name(node: ast.AST) -> str | None:
    return _attr_name(node.func) if isinstance(node, ast.Call) else None


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _attr_name(target) == "jit"


def _int_constant(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _names(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _shape_nodes(call: ast.Call) -> list[ast.AST]:
    """The arguments of a call that size a tensor."""
    name = _call_name(call)
    if name == "arange":
        return list(call.args)
    if name in _SHAPE_CALLS:
        i = _SHAPE_CALLS[name]
        nodes: list[ast.AST] = call.args[i : i + 1]
        return nodes + [kw.value for kw in call.keywords if kw.arg == "shape"]
    if name in _BLOCK_CALLS:
        return [kw.value for kw in call.keywords if kw.arg == "block_shape"]
    return []


def _shape_constexprs(expr: ast.AST, constexprs: set[str]) -> set[str]:
    found: set[str] = set()
    for call in (n for n in ast.walk(expr) if isinstance(n, ast.Call)):
        for node in _shape_nodes(call):
            found |= _names(node) & constexprs
    return found


def kernel_roles(fn: ast.FunctionDef) -> KernelRoles:
    constexprs = {
        a.arg
        for a in [*fn.args.args, *fn.args.kwonlyargs]
        if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
    }
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    pow2: set[str] = set()
    tiles: set[str] = set()
    for call in calls:
        for node in _shape_nodes(call):
            pow2 |= _names(node) & constexprs
    tiles |= pow2
    has_loop = False
    for node in ast.walk(fn):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
            it = node.iter
            if _call_name(it) in _RANGE_CALLS:
                # a loop's count or step sizes the work a program does
                tiles |= set().union(*(_names(a) for a in it.args)) & constexprs
                has_loop = has_loop or _call_name(it) == "range"
    # which tiles each value carries: through tensor shapes, not through program ids
    facts = []  # per assignment: targets, names read, tiles shaped, reads tl.program_id
    for a in (n for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AugAssign)):
        targets = a.targets if isinstance(a, ast.Assign) else [a.target]
        facts.append(
            (
                set().union(*(_names(t) for t in targets)),
                _names(a.value),
                _shape_constexprs(a.value, constexprs),
                any(_call_name(n) == "program_id" for n in ast.walk(a.value)),
            )
        )
    carries: dict[str, set[str]] = {}
    from_pid: set[str] = set()
    for _ in range(4):  # a fixpoint over the assignments, in any order
        for targets, reads, shaped, pid in facts:
            value = shaped.union(*(carries.get(n, set()) for n in reads))
            by_pid = (pid or bool(reads & from_pid)) and not shaped
            for name in targets:
                carries.setdefault(name, set()).update(value)
                if by_pid:
                    from_pid.add(name)

    def carried(expr: ast.AST) -> set[str]:
        out = _shape_constexprs(expr, constexprs)
        for name in _names(expr):
            out |= carries.get(name, set())
        return out

    dot: dict[str, str] = {}
    dots = [c for c in calls if _call_name(c) == "dot" and len(c.args) >= 2]
    for c in dots:
        a, b = carried(c.args[0]) & tiles, carried(c.args[1]) & tiles
        for name in a & b:
            dot[name] = "K"
        for name in a - b:
            dot.setdefault(name, "M")
        for name in b - a:
            dot.setdefault(name, "N")
    swizzles: set[str] = set()
    for _, reads, _, pid in facts:
        if pid or reads & from_pid:
            swizzles |= (reads & constexprs) - tiles
    return KernelRoles(
        name=fn.name,
        constexprs=frozenset(constexprs),
        tiles=frozenset(tiles),
        pow2=frozenset(pow2),
        swizzles=frozenset(swizzles),
        dot=dot,
        has_dot=bool(dots),
        has_loop=has_loop,
    )


def _bindings(fn: ast.AST) -> dict[str, list[ast.Assign]]:
    """name -> its plain one-target assignments in the function."""
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


def _grid_meta_keys(grid_nodes: Sequence[ast.AST]) -> set[str]:
    """META["BLOCK"] keys read by a grid lambda."""
    keys = set()
    for g in grid_nodes:
        for n in ast.walk(g):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant):
                keys |= {n.slice.value} if isinstance(n.slice.value, str) else set()
    return keys


def find(source: str) -> Found:
    """Every knob of the source, in source order; ProposerError when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProposerError(f"tune: the source does not parse (line {exc.lineno})") from None
    off = _Offsets(source)
    found = Found()
    autotune: dict[str, ast.Call] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            found.kernels[node.name] = kernel_roles(node)
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and _attr_name(d.func) == "autotune":
                    autotune[node.name] = d
    launches: list[tuple[str, ast.Call, dict[str, list[ast.Assign]]]] = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if fn.name in found.kernels:
            continue
        bindings = _bindings(fn)
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Subscript):
                launched = _attr_name(call.func.value)
                if launched in found.kernels:
                    launches.append((launched, call, bindings))
    grid_keys = {k: set() for k in found.kernels}
    for kname, call, bindings in launches:
        grid_keys[kname] |= _grid_meta_keys(_grid_nodes(call, bindings))
    for kname, deco in autotune.items():
        found.knobs += _autotune_knobs(found.kernels[kname], deco, off, grid_keys[kname])
    for kname, call, bindings in launches:
        found.knobs += _launch_knobs(
            found.kernels[kname], call, bindings, off, kname in autotune, found.skipped
        )
    keys: set[str] = set()
    unique = []
    for k in found.knobs:  # a kernel launched twice: its first launch's knobs
        if k.key not in keys:
            keys.add(k.key)
            unique.append(k)
    found.knobs = unique
    return found


def _constexpr_role(roles: KernelRoles, name: str, in_grid: bool) -> str | None:
    if name in roles.tiles or (in_grid and name in roles.constexprs):
        return TILE
    if name in roles.swizzles:
        return SWIZZLE
    return None


def _launch_knobs(
    roles: KernelRoles,
    call: ast.Call,
    bindings: Mapping[str, list[ast.Assign]],
    off: _Offsets,
    autotuned: bool,
    skipped: list[str],
) -> list[Knob]:
    knobs: list[Knob] = []
    grid = _grid_nodes(call, bindings)
    grid_names = set().union(*(_names(g) for g in grid))
    given = set()
    literals = [
        _int_constant(kw.value)
        for kw in call.keywords
        if kw.arg in roles.constexprs and _constexpr_role(roles, kw.arg, False) != SWIZZLE
    ]
    grid_literals = {_int_constant(n) for g in grid for n in ast.walk(g)} - {None}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        target: ast.AST = kw.value
        bound = isinstance(kw.value, ast.Name) and len(bindings.get(kw.value.id, ())) == 1
        if bound:
            target = bindings[kw.value.id][0].value  # set where bound: the grid follows
        value = _int_constant(target)
        in_grid = bound and kw.value.id in grid_names  # type: ignore[attr-defined]
        unique = value is not None and literals.count(value) == 1
        if not bound and unique and value in grid_literals:
            in_grid = True  # the grid divides by the same literal: it is computed from it
        role = OPTION_ROLE.get(kw.arg) or _constexpr_role(roles, kw.arg, in_grid)
        if kw.arg in LAUNCH_OPTIONS:
            given.add(kw.arg)
        if role is None:
            continue
        scaled = None
        if value is None:  # computed at the launch: tune scales the computed value
            scaled = ast.get_source_segment(off.source, target) or ast.unparse(target)
            value = 0
        spans = [off.of(target)]
        if not bound and role == TILE and unique:
            # the same literal in the launch's grid (when no other tile shares it)
            spans += [off.of(n) for g in grid for n in ast.walk(g) if _int_constant(n) == value]
        knobs.append(
            Knob(
                key=f"{roles.name}.{kw.arg}",
                label=kw.arg,
                kernel=roles.name,
                name=kw.arg,
                role=role,
                value=value,
                spans=tuple(spans),
                pow2=kw.arg in roles.pow2,
                dot=roles.dot.get(kw.arg),
                scaled=scaled,
            )
        )
    if not autotuned:  # an autotuned kernel takes its options from its configs
        end = off.of(call)[1] - 1  # before the closing parenthesis
        while end > 0 and off.source[end - 1] in " \n\t,":
            end -= 1
        for option, default in LAUNCH_DEFAULTS.items():
            if option not in given:
                knobs.append(
                    Knob(
                        key=f"{roles.name}.{option}",
                        label=option,
                        kernel=roles.name,
                        name=option,
                        role=OPTION_ROLE[option],
                        value=default,
                        spans=(),
                        insert_at=end,
                    )
                )
    return knobs


def _autotune_knobs(
    roles: KernelRoles, decorator: ast.Call, off: _Offsets, grid_keys: set[str]
) -> list[Knob]:
    knobs: list[Knob] = []
    configs = next((kw.value for kw in decorator.keywords if kw.arg == "configs"), None)
    if configs is None and decorator.args:
        configs = decorator.args[0]
    if not isinstance(configs, ast.List | ast.Tuple):
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
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        pairs += [(kw.arg, kw.value) for kw in cfg.keywords if kw.arg in LAUNCH_OPTIONS]
        for name, node in pairs:
            value = _int_constant(node)
            if value is None:
                continue
            role = OPTION_ROLE.get(name) or _constexpr_role(roles, name, name in grid_keys) or VALUE
            knobs.append(
                Knob(
                    key=f"{roles.name}.config{i}.{name}",
                    label=f"config{i}.{name}",
                    kernel=roles.name,
                    name=name,
                    role=role,
                    value=value,
                    spans=(off.of(node),),
                    pow2=name in roles.pow2,
                    dot=roles.dot.get(name),
                )
            )
    return knobs


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    out = source
    for e in sorted(set(edits), key=lambda e: e.start, reverse=True):
        out = out[: e.start] + e.text + out[e.end :]
    return out


def with_config(source: str, knobs: Sequence[Knob], config: Mapping[str, int]) -> str:
    """The source with each knob set to config[key] (knobs absent from config stay)."""
    edits = [e for k in knobs if k.key in config for e in k.edits(config[k.key])]
    return apply_edits(source, edits)
