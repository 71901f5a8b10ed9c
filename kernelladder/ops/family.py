"""Parameterized Triton kernel templates for the five built-in ops.

A `Family` is one algorithm for an op (e.g. softmax "online"): a fixed kernel body plus a
grid of parameters (block sizes, warps per element, rows per program, cache hints ...).
`render` turns one point of that grid into a complete, self-contained candidate file whose
first line records the point for a person.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

HEADER_PREFIX = "# kernelladder-search: "

# What a parameter mostly affects, so verdict feedback can pick which to move first.
FOCUS_LARGE, FOCUS_SMALL, FOCUS_ALL = "large", "small", "all"

Params = Mapping[str, Any]


@dataclass(frozen=True)
class Param:
    name: str
    values: tuple[Any, ...]  # ordered: neighbours are adjacent values
    structural: bool = False  # changing it rewrites the kernel's structure (undo: medium)
    resource: bool = False  # a higher index needs more registers / shared memory
    focus: str = FOCUS_ALL
    doc: str = ""
    # Given the suite's shape dims, whether moving this parameter can change anything
    # (e.g. the long-row fallback when no row is long); None: always.
    relevant: Callable[[list[Mapping[str, int]]], bool] | None = None

    def matters(self, dims: list[Mapping[str, int]]) -> bool:
        if self.relevant is None or not dims:
            return True
        try:
            return bool(self.relevant(dims))
        except (KeyError, TypeError, ValueError):
            return True


@dataclass(frozen=True)
class Family:
    op: str
    name: str  # the strategy label of a branch
    summary: str  # one line for a person (and the proposal's undo reason)
    params: tuple[Param, ...]  # in the order the local search tries them
    start: Mapping[str, Any]
    body: str  # the kernel source after the parameter block
    valid: Callable[[Params], bool] = field(default=lambda p: True)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # constants of the family
    # Pairs of parameters also moved together, one step each in the same direction, right
    # after the single steps (e.g. query rows and warps: the work per warp stays put)
    links: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        missing = [n for n in names if n not in self.start]
        if missing:
            raise ValueError(f"{self.op}/{self.name}: no start value for {missing}")
        unknown = [n for pair in self.links for n in pair if n not in names]
        if unknown:
            raise ValueError(f"{self.op}/{self.name}: links name no parameter {unknown}")
        # shared start dicts may carry other families' parameters: keep this grid's only
        object.__setattr__(self, "start", {n: self.start[n] for n in names})

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def points(self) -> Iterator[dict[str, Any]]:
        """Every valid point of the grid, in a fixed order."""
        names = [p.name for p in self.params]
        for combo in itertools.product(*(p.values for p in self.params)):
            point = dict(zip(names, combo, strict=True))
            if self.valid(point):
                yield point

    def size(self) -> int:
        return sum(1 for _ in self.points())

    def render(self, params: Params) -> str:
        missing = [p.name for p in self.params if p.name not in params]
        if missing:
            raise ValueError(f"{self.op}/{self.name}: missing parameters {missing}")
        point = {p.name: params[p.name] for p in self.params}
        header = HEADER_PREFIX + json.dumps(
            {"op": self.op, "family": self.name, "params": point},
            sort_keys=True,
            separators=(",", ":"),
        )
        lines = [
            header,
            f'"""{self.op}, search family "{self.name}": {self.summary}',
            "",
            "Written by kernelladder's built-in search from a parameterized template.",
            '"""',
            "",
            "import torch",
            "import triton",
            "import triton.language as tl",
            "",
            "# search parameters",
        ]
        lines += [f"{name} = {value!r}" for name, value in point.items()]
        lines += [
            f"{name} = {value!r}  # fixed by the family" for name, value in self.fixed.items()
        ]
        return "\n".join(lines) + "\n\n" + self.body.strip("\n") + "\n"


def config_key(op: str, family: str, params: Params) -> str:
    """The identity of a grid point: the same key is never proposed twice on a branch."""
    return f"{op}/{family}:" + json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def any_row_longer(limit: int, dim: str = "N") -> Callable[[list[Mapping[str, int]]], bool]:
    """Relevance test: some shape has next_pow2(dims[dim]) above `limit`."""

    def test(dims: list[Mapping[str, int]]) -> bool:
        return any(next_pow2(d[dim]) > limit for d in dims)

    return test


# Shared wrapper helpers pasted into bodies (each candidate file stands alone).
SM_COUNT_HELPER = '''
_SM_COUNT = {}


def _num_sms(device):
    """Streaming multiprocessors of the device (a small stand-in on the CPU interpreter)."""
    if device.type != "cuda":
        return 2
    index = device.index if device.index is not None else torch.cuda.current_device()
    count = _SM_COUNT.get(index)
    if count is None:
        count = torch.cuda.get_device_properties(index).multi_processor_count
        _SM_COUNT[index] = count
    return count
'''


def family_lines(family: Family) -> list[str]:
    """A family as a prompt reads it: name and summary, then each parameter's values (the
    start marked) and what it does."""
    lines = [f"- {family.name}: {family.summary}"]
    for p in family.params:
        values = ", ".join(f"[{v!r}]" if v == family.start[p.name] else repr(v) for v in p.values)
        lines.append(f"    {p.name} in {values}" + (f": {p.doc}" if p.doc else ""))
    return lines
