"""The tuner's space: each knob's values, the constraints of the kernel and the GPU, the
seeds (the user's start and Triton's usual configs), and the regions a failed compile
rules out.

Constraints: a value in `tl.arange` or a tensor shape is a power of two; a `tl.dot`
operand tile is at least 16; a dot kernel's operand buffers (stages x (M*K + K*N) x 2
bytes, 16-bit operands) fit the GPU's shared memory per block, and its fp32 accumulator
fits the registers (at most 255 per thread, 64K per SM); a kernel without tl.dot keeps
at most 256 live elements per thread and at least one per 4 threads. A config that
failed to compile for resources rules out every config at least as hungry (every tile
and the stages as large or larger).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.proposers.tune.knobs import (
    CTAS,
    MAXNREG,
    STAGES,
    SWIZZLE,
    TILE,
    VALUE,
    WARPS,
    Found,
    Knob,
)

Config = tuple[int, ...]  # one value per knob, in the space's knob order
# Shared memory per block (opt-in maximum) by compute capability (CUDA's tables).
SMEM_BY_CC = {
    "7.0": 98_304, "7.5": 65_536, "8.0": 166_912, "8.6": 101_376, "8.7": 166_912,
    "8.9": 101_376, "9.0": 232_448, "10.0": 232_448, "12.0": 101_376,
}  # fmt: skip
SMEM_UNKNOWN = 232_448  # the largest of today's GPUs; a compile failure marks what it lets by
REGS_PER_THREAD, REGS_PER_SM = 255, 65_536
DOT_OPERAND_BYTES = 2
ELEMENTS_PER_THREAD_MAX = 256
ENUMERATE_MAX = 50_000  # larger spaces are sampled, never called spent
RESOURCE_WORDS = ("out of resource", "outofresources", "shared memory", "registers", "required:")
# Triton's matmul tutorial configs: (BM, BN, BK, GROUP_M, num_warps, num_stages)
TRITON_MATMUL_CONFIGS = (
    (128, 256, 64, 8, 8, 3), (64, 256, 32, 8, 4, 4), (128, 128, 32, 8, 4, 4),
    (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4),
    (64, 32, 32, 8, 2, 5), (32, 64, 32, 8, 2, 5), (128, 128, 64, 8, 8, 3),
    (128, 256, 32, 8, 8, 3), (256, 128, 64, 8, 8, 3),
)  # fmt: skip


def _powers(low: int, high: int) -> list[int]:
    out, v = [], 1
    while v <= high:
        if v >= low:
            out.append(v)
        v *= 2
    return out


def domain(knob: Knob, has_loop: bool, dot: bool = False) -> list[int]:
    """The values a knob may take, ascending; the start's value is always one."""
    v = knob.value
    if knob.scaled is not None:  # steps of a computed value
        return [-2, -1, 0, 1, 2]
    if knob.role in (TILE, VALUE):
        low = 16 if knob.dot else max(1, v // 16)
        if knob.dot:
            high = 128 if knob.dot == "K" else 256
        else:  # a tensor's width may grow to a whole row; a loop's count less far
            high = max(v * 64, 8192) if knob.pow2 else max(v * 64, 16)
        values = _powers(low, high)
    elif knob.role == WARPS:
        values = [1, 2, 4, 8, 16]
    elif knob.role == STAGES:
        values = list(range(2, 6) if dot else range(1, 5)) if has_loop else [v]
    elif knob.role == SWIZZLE:
        values = [1, 2, 4, 8, 16]
    elif knob.role == CTAS:
        values = [1, 2, 4]
    elif knob.role == MAXNREG:
        values = [64, 96, 128, 168, 255]
    else:
        values = [v]
    return sorted(set(values) | {v})


def smem_limit(hardware: Mapping[str, Any] | None) -> int:
    cc = str((hardware or {}).get("cc") or "")
    return SMEM_BY_CC.get(cc, SMEM_UNKNOWN)


@dataclass
class Space:
    """The knobs, their values and the rules; configs are tuples in knob order."""

    knobs: list[Knob]
    values: list[list[int]]
    found: Found
    smem_limit: int
    infeasible: list[Config] = field(default_factory=list)  # failed-compile corners
    _index: dict[Config, tuple[int, ...] | None] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, found: Found, hardware: Mapping[str, Any] | None = None) -> Space:
        knobs, values = [], []
        for k in found.knobs:
            roles = found.kernels.get(k.kernel)
            d = domain(k, bool(roles and roles.has_loop), bool(roles and roles.has_dot))
            if len(d) > 1:
                knobs.append(k)
                values.append(d)
        return cls(knobs, values, found, smem_limit(hardware))

    # --- configs --------------------------------------------------------------------------
    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k.key for k in self.knobs)

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.values)

    def start(self) -> Config:
        return tuple(k.value for k in self.knobs)

    def config_of(self, found: Found) -> Config | None:
        """A source's config in this space, when it has the same knobs; else None."""
        by_key = {k.key: k.value for k in found.knobs}
        if not all(key in by_key for key in self.keys):
            return None
        return tuple(by_key[key] for key in self.keys)

    def as_dict(self, config: Config) -> dict[str, int]:
        return dict(zip(self.keys, config, strict=True))

    def index(self, config: Config) -> tuple[int, ...] | None:
        if config not in self._index:
            try:
                self._index[config] = tuple(
                    vals.index(v) for vals, v in zip(self.values, config, strict=True)
                )
            except ValueError:
                self._index[config] = None
        return self._index[config]

    def all(self) -> Iterator[Config]:
        return itertools.product(*self.values)

    # --- constraints ----------------------------------------------------------------------
    def _value(self, config: Config, kernel: str, role: str, default: int) -> int:
        for k, v in zip(self.knobs, config, strict=True):
            if k.kernel == kernel and k.role == role and ".config" not in k.key:
                return default if k.scaled is not None else v
        return next(
            (
                k.value
                for k in self.found.knobs
                if k.kernel == kernel and k.role == role and k.scaled is None
            ),
            default,
        )

    def estimates(self, config: Config) -> dict[str, dict[str, float]]:
        """Per kernel: shared memory bytes (dot operand buffers) and the accumulator's
        registers per thread, or live elements per thread (no tl.dot)."""
        out: dict[str, dict[str, float]] = {}
        values = dict(zip(self.keys, config, strict=True))
        for name, roles in self.found.kernels.items():
            tiles = {
                k.name: values.get(k.key, k.value)
                for k in self.found.knobs
                if k.kernel == name
                and k.role == TILE
                and ".config" not in k.key
                and k.scaled is None
            }
            if not tiles:
                continue
            warps = self._value(config, name, WARPS, 4)
            stages = self._value(config, name, STAGES, 3)
            if roles.has_dot:
                dims = {
                    r: math.prod(v for t, v in tiles.items() if roles.dot.get(t) == r)
                    for r in "MNK"
                }
                smem = stages * (dims["M"] * dims["K"] + dims["K"] * dims["N"]) * DOT_OPERAND_BYTES
                regs = 32 + dims["M"] * dims["N"] / (32 * warps)
                out[name] = {"smem": smem, "regs": regs, "warps": warps}
            else:
                shaped = [v for t, v in tiles.items() if t in roles.pow2] or list(tiles.values())
                out[name] = {"elements": math.prod(shaped) / (32 * warps), "warps": warps}
        return out

    def why_not(self, config: Config, allowed: Mapping[str, dict[str, float]] | None = None) -> str:
        """Why a config is ruled out, or "" when it is feasible. `allowed`: the start's
        estimates (the user's own start is never ruled out by an estimate it breaks)."""
        for k, v in zip(self.knobs, config, strict=True):
            if k.scaled is not None:
                continue
            if k.pow2 and v & (v - 1) and v != k.value:
                return f"{k.label} {v} is not a power of two"
            if k.dot and v < 16:
                return f"{k.label} {v}: tl.dot tiles are at least 16"
        for name, e in self.estimates(config).items():
            base = (allowed or {}).get(name, {})
            if "smem" in e:
                if e["smem"] > max(self.smem_limit, base.get("smem", 0)):
                    return f"{name}: {int(e['smem'])} B of shared memory > {self.smem_limit} B"
                regs = max(REGS_PER_THREAD, base.get("regs", 0))
                if e["regs"] > regs or e["regs"] * 32 * e["warps"] > REGS_PER_SM:
                    return f"{name}: about {int(e['regs'])} registers per thread"
            else:
                if e["elements"] > max(ELEMENTS_PER_THREAD_MAX, base.get("elements", 0)):
                    return f"{name}: {e['elements']:.0f} live elements per thread"
                if e["elements"] < min(0.25, base.get("elements", 1.0)):
                    return f"{name}: more than 4 threads per element"
        for corner in self.infeasible:
            if self.within(config, corner):
                return "as hungry as a config that failed to compile for resources"
        return ""

    def within(self, config: Config, corner: Config) -> bool:
        """Whether config asks at least as much as a failed corner (every tile and the
        stages as large or larger, the other knobs as they are)."""
        hungry = [i for i, k in enumerate(self.knobs) if k.role in (TILE, STAGES, VALUE)]
        return bool(hungry) and all(config[i] >= corner[i] for i in hungry)

    def mark_infeasible(self, config: Config) -> None:
        if not any(self.within(config, c) for c in self.infeasible):
            self.infeasible.append(config)

    # --- seeds ----------------------------------------------------------------------------
    def seeds(self) -> list[Config]:
        """The start, then Triton's usual configs for the kernel's kind, snapped to the
        space: the matmul tutorial's list for a dot kernel; for other kernels each tile
        size 512..8192 with the warps Triton's norm tutorials pick (size / 256, 1..16)."""
        start = self.start()
        out = [start]
        by_role: dict[str, list[int]] = {}
        for i, k in enumerate(self.knobs):
            if ".config" not in k.key and k.scaled is None:
                by_role.setdefault(k.dot or k.role, []).append(i)
        dot = any(r.has_dot for r in self.found.kernels.values())
        if dot:
            for bm, bn, bk, group, warps, stages in TRITON_MATMUL_CONFIGS:
                want = {"M": bm, "N": bn, "K": bk, SWIZZLE: group, WARPS: warps, STAGES: stages}
                out.append(self._snap(start, by_role, want))
        else:
            tiles = by_role.get(TILE, [])
            if tiles:
                widest = max(tiles, key=lambda i: start[i])
                for size in (512, 1024, 2048, 4096, 8192):
                    warps = min(max(size // 256, 1), 16)
                    out.append(self._snap(start, {"w": [widest], WARPS: by_role.get(WARPS, [])},
                                          {"w": size, WARPS: warps}))  # fmt: skip
        seen, unique = set(), []
        for c in out:
            if c not in seen:
                seen.add(c)
                unique.append(c)
        return unique

    def _snap(
        self, start: Config, by_role: Mapping[str, list[int]], want: Mapping[str, int]
    ) -> Config:
        c = list(start)
        for role, target in want.items():
            for i in by_role.get(role, []):
                vals = self.values[i]
                c[i] = min(vals, key=lambda v: (abs(math.log2(max(v, 1)) - math.log2(target)), v))
        return tuple(c)


def resource_failure(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in RESOURCE_WORDS)


def distance(space: Space, a: Config, b: Config) -> int:
    """Steps along each knob's values between two configs (summed)."""
    ia, ib = space.index(a), space.index(b)
    if ia is None or ib is None:
        return sum(x != y for x, y in zip(a, b, strict=True)) * 2
    return sum(abs(x - y) for x, y in zip(ia, ib, strict=True))


def neighbours(space: Space, base: Config, radius: int) -> Iterator[tuple[Config, tuple[int, ...]]]:
    """Configs that move exactly `radius` knobs of base one step each: (config, moved)."""
    idx = space.index(base)
    if idx is None:
        return
    n = len(space.knobs)
    for moved in itertools.combinations(range(n), radius):
        for signs in itertools.product((1, -1), repeat=radius):
            c = list(base)
            ok = True
            for i, s in zip(moved, signs, strict=True):
                j = idx[i] + s
                if not 0 <= j < len(space.values[i]):
                    ok = False
                    break
                c[i] = space.values[i][j]
            if ok:
                yield tuple(c), moved


def spent_text(proposed: int, feasible: int, total: int) -> str:
    return f"{proposed} of {feasible} feasible configs proposed ({total} in the space)"
