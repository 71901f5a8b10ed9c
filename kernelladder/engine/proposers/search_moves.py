"""The search's moves on a family's grid: single-parameter steps from a base point in the
order most likely to pay, then linked pairs, then farther rings."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kernelladder.engine.proposers.search_judging import score
from kernelladder.engine.proposers.search_memory import Trial
from kernelladder.ops.family import FOCUS_ALL, Family, Param


def ordered_moves(
    family: Family,
    params: Sequence[Param],
    base: Trial,
    rotation: int,
    focus: str | None,
    shrink: bool,
) -> list[tuple[Param, int]]:
    """Single-parameter grid steps from the base, most promising first."""
    if rotation and params:
        r = rotation % len(params)
        params = [*params[r:], *params[:r]]
    if focus:
        rank = {focus: 0, FOCUS_ALL: 1}
        params = sorted(params, key=lambda p: rank.get(p.focus, 2))
    moves: list[tuple[Param, int]] = []
    for p in params:
        directions = (-1, +1) if (shrink and p.resource) else (+1, -1)
        moves += [(p, d) for d in directions]
    if shrink:
        moves.sort(key=lambda m: 0 if (m[0].resource and m[1] < 0) else 1)
    # the move that made the base better than its own base, once more first
    momentum = [(name, d) for name, d in base.moved]
    if momentum and (score(base) is not None or base.speedup is not None):
        first = [m for m in moves if (m[0].name, m[1]) in momentum]
        moves = first + [m for m in moves if m not in first]
    return moves


def rings(
    family: Family,
    base_params: Mapping[str, Any],
    moves: Sequence[tuple[Param, int]],
    params: Sequence[Param],
) -> Iterator[tuple[dict[str, Any], tuple[tuple[str, int], ...]]]:
    """Grid points by distance from the base: ring 1 in `moves` order, then the family's
    linked pairs moved together, then farther rings (every combination of steps whose
    sizes add up to the ring's distance)."""
    index = {
        p.name: p.values.index(base_params[p.name])
        for p in params
        if base_params[p.name] in p.values
    }
    params = [p for p in params if p.name in index]
    for p, d in moves:
        if p.name not in index:
            continue
        j = index[p.name] + d
        if 0 <= j < len(p.values):
            point = dict(base_params)
            point[p.name] = p.values[j]
            yield point, ((p.name, d),)
    first_way = {p.name: d for p, d in reversed(moves)}  # the direction ring 1 tried first
    for a, b in family.links:
        if a not in index or b not in index:
            continue
        way = first_way.get(a, +1)
        for d in (way, -way):
            ja, jb = index[a] + d, index[b] + d
            pa, pb = family.param(a), family.param(b)
            if 0 <= ja < len(pa.values) and 0 <= jb < len(pb.values):
                yield {**base_params, a: pa.values[ja], b: pb.values[jb]}, ((a, d), (b, d))
    max_distance = sum(len(p.values) - 1 for p in params)
    for distance in range(2, max_distance + 1):
        yield from _ring(base_params, params, index, distance, 0, (), {})


def _ring(
    base_params: Mapping[str, Any],
    params: Sequence[Param],
    index: Mapping[str, int],
    remaining: int,
    start: int,
    moved: tuple[tuple[str, int], ...],
    changes: dict[str, Any],
) -> Iterator[tuple[dict[str, Any], tuple[tuple[str, int], ...]]]:
    if remaining == 0:
        if len(moved) >= 1:
            yield {**base_params, **changes}, moved
        return
    for i in range(start, len(params)):
        p = params[i]
        here = index[p.name]
        for size in range(1, remaining + 1):
            for d in (+1, -1):
                j = here + d * size
                if 0 <= j < len(p.values):
                    yield from _ring(
                        base_params,
                        params,
                        index,
                        remaining - size,
                        i + 1,
                        (*moved, (p.name, d)),
                        {**changes, p.name: p.values[j]},
                    )
