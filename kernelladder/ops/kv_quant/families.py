"""kv_quant templates: x bf16 [T, H, D] -> (q int8 [T, H, D], scale fp32 [T, H]).

Per row of D: scale = absmax / 127 (1 for an all-zero row), q = clamp(round(x / scale),
-127, 127), with IEEE division and round-half-to-even like the eager reference. Rows are
short (D = 128 is 256 bytes), so the families differ in how many rows one program owns.
"""

from __future__ import annotations

from typing import Any

from kernelladder.ops.family import FOCUS_LARGE, FOCUS_SMALL, SM_COUNT_HELPER, Family, Param

_WARPS = Param("NUM_WARPS", (1, 2, 4, 8), resource=True)
_X_EVICT = Param("X_EVICT", ("", "evict_first"), focus=FOCUS_LARGE)
_Q_CACHE = Param("Q_CACHE", ("", ".cs"), focus=FOCUS_LARGE, doc="streaming store hint")
_QDIV = Param("QDIV", ("rcp", "div", "rn"), doc="how x / scale is computed")

_QUANT = """
@triton.jit
def _quant_rows(x, rows, cols, rmask, cmask, Q, SC, H, sqt, sqh, sqd, sst, ssh,
                QDIV: tl.constexpr, Q_CACHE: tl.constexpr):
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.where(amax == 0.0, 1.0, tl.div_rn(amax, 127.0))
    # x / scale: IEEE division, the fast approximate one, or one reciprocal per row; the
    # approximate forms can only move a code where the ratio is within ~1e-5 of a tie
    if QDIV == "rn":
        v = tl.div_rn(x, scale[:, None])
    elif QDIV == "div":
        v = x / scale[:, None]
    else:
        v = x * tl.div_rn(1.0, scale)[:, None]
    # round half to even: adding and removing 1.5 * 2**23 rounds to an integer in fp32
    v = (v + 12582912.0) - 12582912.0
    v = tl.minimum(tl.maximum(v, -127.0), 127.0)
    t = rows // H
    h = rows % H
    mask = rmask[:, None] & cmask[None, :]
    tl.store(Q + (t * sqt + h * sqh)[:, None] + cols[None, :] * sqd, v.to(tl.int8),
             mask=mask, cache_modifier=Q_CACHE)
    tl.store(SC + t * sst + h * ssh, scale, mask=rmask)


@triton.jit
def _load_rows(X, rows, cols, rmask, cmask, H, sxt, sxh, sxd, X_EVICT: tl.constexpr):
    t = rows // H
    h = rows % H
    mask = rmask[:, None] & cmask[None, :]
    return tl.load(X + (t * sxt + h * sxh)[:, None] + cols[None, :] * sxd, mask=mask,
                   other=0.0, eviction_policy=X_EVICT).to(tl.float32)
"""

# The entry's start: the outputs and the rows (T * H).
_ENTRY = """

def kernel(x):
    T, H, D = x.shape
    q = torch.empty((T, H, D), dtype=torch.int8, device=x.device)
    scale = torch.empty((T, H), dtype=torch.float32, device=x.device)
    R = T * H"""

_TILE_KERNEL = """

@triton.jit
def _kv_quant_tile(X, Q, SC, R, H, D, sxt, sxh, sxd, sqt, sqh, sqd, sst, ssh,
                   ROWS: tl.constexpr, BLOCK_D: tl.constexpr, X_EVICT: tl.constexpr,
                   QDIV: tl.constexpr, Q_CACHE: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    rmask = rows < R
    cmask = cols < D
    x = _load_rows(X, rows, cols, rmask, cmask, H, sxt, sxh, sxd, X_EVICT)
    _quant_rows(x, rows, cols, rmask, cmask, Q, SC, H, sqt, sqh, sqd, sst, ssh, QDIV, Q_CACHE)
"""

_TILE_LAUNCH = """
    rows = ROWS
    # small inputs: fewer rows per program so every SM gets work
    while rows > 1 and triton.cdiv(R, rows) < _num_sms(x.device) * MIN_PROGRAMS_PER_SM:
        rows //= 2
    _kv_quant_tile[(triton.cdiv(R, rows),)](
        x, q, scale, R, H, D, *x.stride(), *q.stride(), *scale.stride(),
        ROWS=rows, BLOCK_D=triton.next_power_of_2(D), X_EVICT=X_EVICT, QDIV=QDIV,
        Q_CACHE=Q_CACHE, num_warps=NUM_WARPS,
    )
    return q, scale
"""

_TILE = _QUANT + _TILE_KERNEL + SM_COUNT_HELPER + _ENTRY + _TILE_LAUNCH

_PERSISTENT_KERNEL = """

@triton.jit
def _kv_quant_persistent(X, Q, SC, R, H, D, sxt, sxh, sxd, sqt, sqh, sqd, sst, ssh,
                         ROWS: tl.constexpr, BLOCK_D: tl.constexpr, PREFETCH: tl.constexpr,
                         X_EVICT: tl.constexpr, QDIV: tl.constexpr, Q_CACHE: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    tiles = tl.cdiv(R, ROWS)
    lane = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    if PREFETCH:
        nrows = (pid * ROWS + lane).to(tl.int64)
        x_next = _load_rows(X, nrows, cols, nrows < R, cmask, H, sxt, sxh, sxd, X_EVICT)
    for tile in range(pid, tiles, nprog):
        rows = (tile * ROWS + lane).to(tl.int64)
        rmask = rows < R
        if PREFETCH:
            x = x_next
            # issue the next tile's loads before quantizing this one
            nrows = ((tile + nprog) * ROWS + lane).to(tl.int64)
            x_next = _load_rows(X, nrows, cols, nrows < R, cmask, H, sxt, sxh, sxd, X_EVICT)
        else:
            x = _load_rows(X, rows, cols, rmask, cmask, H, sxt, sxh, sxd, X_EVICT)
        _quant_rows(x, rows, cols, rmask, cmask, Q, SC, H, sqt, sqh, sqd, sst, ssh, QDIV, Q_CACHE)
"""

_PERSISTENT_LAUNCH = """
    tiles = triton.cdiv(R, ROWS)
    programs = max(1, min(tiles, _num_sms(x.device) * PROGRAMS_PER_SM))
    _kv_quant_persistent[(programs,)](
        x, q, scale, R, H, D, *x.stride(), *q.stride(), *scale.stride(),
        ROWS=ROWS, BLOCK_D=triton.next_power_of_2(D), PREFETCH=PREFETCH, X_EVICT=X_EVICT,
        QDIV=QDIV, Q_CACHE=Q_CACHE, num_warps=NUM_WARPS,
    )
    return q, scale
"""

_PERSISTENT = _QUANT + _PERSISTENT_KERNEL + SM_COUNT_HELPER + _ENTRY + _PERSISTENT_LAUNCH


def _family(
    name: str,
    summary: str,
    own: tuple[Param, ...],
    start: dict[str, Any],
    body: str,
    fixed: dict[str, Any] | None = None,
) -> Family:
    """A kv_quant family: its own parameters, then how a row is quantized and cached
    (QDIV, X_EVICT, Q_CACHE: reciprocal division, no hints at the start)."""
    return Family(
        op="kv_quant",
        name=name,
        summary=summary,
        params=(*own, _QDIV, _X_EVICT, _Q_CACHE),
        start={**start, "QDIV": "rcp", "X_EVICT": "", "Q_CACHE": ""},
        body=body,
        fixed=fixed or {},
    )


FAMILIES: tuple[Family, ...] = (
    _family(
        "multi-row",
        "a [ROWS, D] tile per program (fewer rows when the input is small)",
        (
            Param("ROWS", (1, 4, 8, 16, 32, 64, 128), resource=True),
            _WARPS,
            Param("MIN_PROGRAMS_PER_SM", (1, 2, 4), focus=FOCUS_SMALL),
        ),
        {"ROWS": 32, "NUM_WARPS": 4, "MIN_PROGRAMS_PER_SM": 2},
        _TILE,
    ),
    _family(
        "persistent",
        "a persistent grid (SMs x PROGRAMS_PER_SM) looping over row tiles, prefetching",
        (
            Param("PROGRAMS_PER_SM", (1, 2, 4, 8, 16), focus=FOCUS_SMALL),
            Param("ROWS", (4, 8, 16, 32, 64), resource=True),
            _WARPS,
            Param("PREFETCH", (False, True), structural=True, resource=True),
        ),
        {"PROGRAMS_PER_SM": 4, "ROWS": 16, "NUM_WARPS": 4, "PREFETCH": True},
        _PERSISTENT,
    ),
    _family(
        "one-row-per-program",
        "one program per row of D (grid = T * H), the plain layout",
        (_WARPS,),
        {"NUM_WARPS": 1},
        _TILE,
        fixed={"ROWS": 1, "MIN_PROGRAMS_PER_SM": 1},
    ),
)
