"""What the search templates of the row-wise ops (softmax, rmsnorm) share: the parameters
of warps per row, cache hints and the long-row fallback, the persistent family, and the
host helpers pasted into their candidates (each candidate file stands alone)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelladder.ops.family import FOCUS_LARGE, FOCUS_SMALL, Family, Param, any_row_longer

EPT = Param(
    "EPT",
    (4, 8, 16, 32),
    doc="elements per thread: num_warps = tile elements / (32 * EPT), within the bounds",
)
MAX_WARPS = Param("MAX_WARPS", (4, 8, 16), resource=True, focus=FOCUS_LARGE)
MIN_WARPS = Param("MIN_WARPS", (1, 2, 4), focus=FOCUS_SMALL)


def warp_bounds(p) -> bool:
    return p["MIN_WARPS"] <= p["MAX_WARPS"]


X_EVICT = Param("X_EVICT", ("", "evict_first", "evict_last"), focus=FOCUS_LARGE)
Y_CACHE = Param("Y_CACHE", ("", ".cs"), focus=FOCUS_LARGE, doc="streaming store hint")


def max_block(fallback: str) -> Param:
    """The longest row held in registers; `fallback` names what longer rows use."""
    return Param(
        "MAX_BLOCK",
        (8192, 16384, 32768),
        resource=True,
        focus=FOCUS_LARGE,
        doc=f"longest row held in registers; longer rows use the {fallback}",
        relevant=any_row_longer(8192),
    )


CHUNK = Param(
    "CHUNK", (2048, 4096, 8192), resource=True, focus=FOCUS_LARGE, relevant=any_row_longer(8192)
)
CONST_N = Param(
    "CONST_N",
    (False, True),
    focus=FOCUS_SMALL,
    doc="compile the row length in (one kernel per N): masks known, loads vectorized",
)
# a [ROWS, N] tile per program, fewer rows where M is too small to fill the GPU
ROWS = Param("ROWS", (1, 2, 4, 8, 16), resource=True, focus=FOCUS_SMALL)
MIN_PROGRAMS_PER_SM = Param("MIN_PROGRAMS_PER_SM", (1, 2, 4), focus=FOCUS_SMALL)
TILE_MAX = Param("TILE_MAX", (4096, 8192, 16384, 32768), resource=True)
TILE_START = {"MIN_PROGRAMS_PER_SM": 2, "TILE_MAX": 16384, "CONST_N": True}

_SHARED = {
    p.name: p for p in (EPT, MAX_WARPS, MIN_WARPS, CONST_N, ROWS, MIN_PROGRAMS_PER_SM, TILE_MAX)
}


def named(names: str) -> tuple[Param, ...]:
    """The shared parameters named (space-separated), in that order: the search's."""
    return tuple(_SHARED[name] for name in names.split())


# start values every row-wise op shares
START = {"EPT": 16, "MIN_WARPS": 4, "Y_CACHE": "", "MAX_BLOCK": 16384, "CHUNK": 4096}


def tile_family(
    op: str,
    name: str,
    summary: str,
    order: str,
    body: str,
    tail: tuple[Param, ...],
    start: Mapping[str, Any],
) -> Family:
    """A [ROWS, N] tile per program: the shared parameters named in `order` (the search's
    order), then the op's tail."""
    return Family(
        op=op,
        name=name,
        summary=summary,
        params=(*named(order), *tail),
        start={**TILE_START, **start},
        body=body,
        valid=warp_bounds,
    )


def persistent_family(
    op: str, body: str, tail: tuple[Param, ...], start: Mapping[str, Any]
) -> Family:
    """A persistent grid over row tiles: its programs, the next tile's prefetch, the rows
    of a tile, then the op's own tail of parameters."""
    return Family(
        op=op,
        name="persistent",
        summary="a persistent grid (SMs x PROGRAMS_PER_SM) looping over row tiles",
        params=(
            Param("PROGRAMS_PER_SM", (1, 2, 4, 8, 16), focus=FOCUS_SMALL),
            Param("PREFETCH", (False, True), structural=True, resource=True),
            Param("ROWS", (1, 2, 4), resource=True, focus=FOCUS_SMALL),
            EPT,
            MAX_WARPS,
            MIN_WARPS,
            *tail,
        ),
        start={**start, "PROGRAMS_PER_SM": 4, "PREFETCH": True, "ROWS": 1},
        body=body,
        valid=warp_bounds,
    )


# Host helpers of the candidates: warps for a tile within the bounds, 64-bit offsets
# only where needed, and how many rows a program takes.
WARPS_HELPERS = """

def _warps(elements):
    return max(MIN_WARPS, min(MAX_WARPS, elements // (32 * EPT)))


def _wide(*tensors):
    # 64-bit offsets only when an element offset can pass 2**31
    return any(sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31 - 1
               for t in tensors)
"""
ROWS_PER_PROGRAM = """

def _rows_per_program(M, block, sms):
    rows = max(1, min(ROWS, TILE_MAX // block))
    # small M: keep enough programs to fill the GPU rather than packing rows
    while rows > 1 and triton.cdiv(M, rows) < sms * MIN_PROGRAMS_PER_SM:
        rows //= 2
    return rows
"""
