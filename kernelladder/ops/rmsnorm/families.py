"""rmsnorm templates: y = x * rsqrt(mean(x^2, -1) + 1e-6) * weight, in fp32, as x.dtype.

Families: one row per program (grid = M), several rows per program as a 2-D tile, and a
persistent grid (a few programs per SM looping over row tiles, the weight loaded once).
Rows longer than MAX_BLOCK fall back to a chunked two-pass loop in every family.
"""

from __future__ import annotations

from kernelladder.ops import row_templates as rows
from kernelladder.ops.family import FOCUS_LARGE, SM_COUNT_HELPER, Family, Param

_W_EVICT = Param("W_EVICT", ("", "evict_last"))
_MAX_BLOCK = rows.max_block("chunked loop")
_STATS_EVICT = Param(
    "STATS_EVICT",
    ("evict_last", ""),
    focus=FOCUS_LARGE,
    doc="hint of the sum-of-squares pass (evict_last keeps the row in L2 for the 2nd pass)",
)

# Shared by every family: rows longer than MAX_BLOCK, in chunks (reads x twice). N is a
# compile-time constant: with a known trip count the loops' loads are issued back to back
# (on an H200 at 32768x8192 bf16: 0.252 ms vs 0.268 ms with N a runtime argument).
_CHUNKED = (
    """
@triton.jit
def _rmsnorm_chunked(X, W, Y, N: tl.constexpr, sxm, sxn, sym, syn, eps,
                     CHUNK: tl.constexpr, STATS_EVICT: tl.constexpr, X_EVICT: tl.constexpr,
                     W_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * sxm
    y_row = Y + row * sym
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=0.0,
                    eviction_policy=STATS_EVICT).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0,
                    eviction_policy=X_EVICT).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy=W_EVICT).to(tl.float32)
        y = x * rstd * w
        tl.store(y_row + cols * syn, y.to(Y.dtype.element_ty), mask=mask,
                 cache_modifier=Y_CACHE)
"""
    + rows.WARPS_HELPERS
    + """

def _launch_chunked(x, weight, y, M, N):
    block = min(CHUNK, triton.next_power_of_2(N))
    _rmsnorm_chunked[(M,)](
        x, weight, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        CHUNK=block, STATS_EVICT=STATS_EVICT, X_EVICT=X_EVICT, W_EVICT=W_EVICT,
        Y_CACHE=Y_CACHE, num_warps=_warps(block),
    )
"""
)

# The entry's start: rows longer than MAX_BLOCK go to the chunked loop.
_ENTRY = """

def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    if block > MAX_BLOCK:
        _launch_chunked(x, weight, y, M, N)
        return y"""

# In the families with CONST_N (their bodies include it; the persistent one has none).
_CONTIG = """

def _contig(x, y):
    # rows addressed as row * N (a compile-time N) when both tensors are dense
    return bool(CONST_N) and x.is_contiguous() and y.is_contiguous()
"""

_ONE_ROW = (
    """
@triton.jit
def _rmsnorm_row(X, W, Y, N_ARG, sxm, sxn, sym, syn, eps, N_CONST: tl.constexpr,
                 CONTIG: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr, WIDE: tl.constexpr,
                 X_EVICT: tl.constexpr, W_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    # N_CONST > 0: the row length is known when compiling, so the mask is too; with
    # CONTIG (dense rows) a row starts at row * N_CONST, whose alignment is known as well,
    # so the loads of a row like 1000 fp32 are vectorized (a runtime 1000 is not)
    if N_CONST > 0:
        N = N_CONST
    else:
        N = N_ARG
    row = tl.program_id(0)
    if WIDE:
        row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    if CONTIG:
        x_ptrs = X + row * N + cols
        y_ptrs = Y + row * N + cols
    else:
        x_ptrs = X + row * sxm + cols * sxn
        y_ptrs = Y + row * sym + cols * syn
    # EVEN: the row is exactly one block, so no mask at all
    if EVEN:
        x = tl.load(x_ptrs, eviction_policy=X_EVICT).to(tl.float32)
        w = tl.load(W + cols, eviction_policy=W_EVICT).to(tl.float32)
    else:
        x = tl.load(x_ptrs, mask=cols < N, other=0.0, eviction_policy=X_EVICT).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy=W_EVICT).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = (x * rstd * w).to(Y.dtype.element_ty)
    if EVEN:
        tl.store(y_ptrs, y, cache_modifier=Y_CACHE)
    else:
        tl.store(y_ptrs, y, mask=cols < N, cache_modifier=Y_CACHE)
"""
    + _CHUNKED
    + _CONTIG
    + _ENTRY
    + """
    _rmsnorm_row[(M,)](
        x, weight, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        N_CONST=N if CONST_N else 0, CONTIG=_contig(x, y), BLOCK=block, EVEN=block == N,
        WIDE=_wide(x, y), X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE,
        num_warps=_warps(block),
    )
    return y
"""
)

# A [ROWS, BLOCK] tile per program; used by multi-row and (in a loop) by persistent.
_TILE_HELPERS = """
@triton.jit
def _load_tile(ptrs, rows, cols, M, N, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
               EVICT: tl.constexpr):
    if EVEN_N:
        if EVEN_M:
            v = tl.load(ptrs, eviction_policy=EVICT)
        else:
            v = tl.load(ptrs, mask=(rows < M)[:, None], other=0.0, eviction_policy=EVICT)
    else:
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICT)
    return v


@triton.jit
def _store_tile(ptrs, y, rows, cols, M, N, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                CACHE: tl.constexpr):
    if EVEN_N:
        if EVEN_M:
            tl.store(ptrs, y, cache_modifier=CACHE)
        else:
            tl.store(ptrs, y, mask=(rows < M)[:, None], cache_modifier=CACHE)
    else:
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        tl.store(ptrs, y, mask=mask, cache_modifier=CACHE)


@triton.jit
def _load_weight(W, cols, N, EVEN_N: tl.constexpr, EVICT: tl.constexpr):
    if EVEN_N:
        w = tl.load(W + cols, eviction_policy=EVICT)
    else:
        w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy=EVICT)
    return w.to(tl.float32)
"""

_TILE_KERNEL = (
    _TILE_HELPERS
    + """

@triton.jit
def _rmsnorm_tile(X, W, Y, M, N_ARG, sxm, sxn, sym, syn, eps, N_CONST: tl.constexpr,
                  CONTIG: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr, EVEN_M: tl.constexpr,
                  EVEN_N: tl.constexpr, WIDE: tl.constexpr, X_EVICT: tl.constexpr,
                  W_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    if N_CONST > 0:  # as in the one-row kernel: masks and row alignment known
        N = N_CONST
    else:
        N = N_ARG
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    if WIDE:
        rows = rows.to(tl.int64)
    if CONTIG:
        x_off = rows[:, None] * N + cols[None, :]
        y_off = rows[:, None] * N + cols[None, :]
    else:
        x_off = rows[:, None] * sxm + cols[None, :] * sxn
        y_off = rows[:, None] * sym + cols[None, :] * syn
    x = _load_tile(X + x_off, rows, cols, M, N, EVEN_M, EVEN_N, X_EVICT).to(tl.float32)
    w = _load_weight(W, cols, N, EVEN_N, W_EVICT)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None] * w[None, :]
    _store_tile(Y + y_off, y.to(Y.dtype.element_ty), rows, cols, M, N, EVEN_M, EVEN_N,
                Y_CACHE)
"""
)

_MULTI_ROW = (
    _TILE_KERNEL
    + _CHUNKED
    + _CONTIG
    + SM_COUNT_HELPER
    + rows.ROWS_PER_PROGRAM
    + _ENTRY
    + """
    rows = _rows_per_program(M, block, _num_sms(x.device))
    _rmsnorm_tile[(triton.cdiv(M, rows),)](
        x, weight, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        N_CONST=N if CONST_N else 0, CONTIG=_contig(x, y), ROWS=rows, BLOCK=block,
        EVEN_M=M % rows == 0, EVEN_N=block == N,
        WIDE=_wide(x, y), X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE,
        num_warps=_warps(rows * block),
    )
    return y
"""
)

_PERSISTENT = (
    _TILE_HELPERS
    + """

@triton.jit
def _rmsnorm_persistent(X, W, Y, M, N, sxm, sxn, sym, syn, eps,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr, PREFETCH: tl.constexpr,
                        EVEN_N: tl.constexpr, WIDE: tl.constexpr, X_EVICT: tl.constexpr,
                        W_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    tiles = tl.cdiv(M, ROWS)
    cols = tl.arange(0, BLOCK)
    lane = tl.arange(0, ROWS)
    # the weight is read once per program, not once per row
    w = _load_weight(W, cols, N, EVEN_N, W_EVICT)
    if PREFETCH:
        rows = pid * ROWS + lane
        if WIDE:
            rows = rows.to(tl.int64)
        x_next = _load_tile(X + rows[:, None] * sxm + cols[None, :] * sxn, rows, cols, M, N,
                            False, EVEN_N, X_EVICT)
    for tile in range(pid, tiles, nprog):
        rows = tile * ROWS + lane
        if WIDE:
            rows = rows.to(tl.int64)
        if PREFETCH:
            x = x_next.to(tl.float32)
            # issue the next tile's loads before reducing this one
            nrows = (tile + nprog) * ROWS + lane
            if WIDE:
                nrows = nrows.to(tl.int64)
            x_next = _load_tile(X + nrows[:, None] * sxm + cols[None, :] * sxn, nrows, cols,
                                M, N, False, EVEN_N, X_EVICT)
        else:
            x = _load_tile(X + rows[:, None] * sxm + cols[None, :] * sxn, rows, cols, M, N,
                           False, EVEN_N, X_EVICT).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        y = x * rstd[:, None] * w[None, :]
        _store_tile(Y + rows[:, None] * sym + cols[None, :] * syn, y.to(Y.dtype.element_ty),
                    rows, cols, M, N, False, EVEN_N, Y_CACHE)
"""
    + _CHUNKED
    + SM_COUNT_HELPER
    + _ENTRY
    + """
    rows = max(1, min(ROWS, 16384 // block))
    tiles = triton.cdiv(M, rows)
    programs = max(1, min(tiles, _num_sms(x.device) * PROGRAMS_PER_SM))
    _rmsnorm_persistent[(programs,)](
        x, weight, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        ROWS=rows, BLOCK=block, PREFETCH=PREFETCH, EVEN_N=block == N, WIDE=_wide(x, y),
        X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(rows * block),
    )
    return y
"""
)

_COMMON_START = {
    **rows.START,
    "MAX_WARPS": 16,
    "X_EVICT": "evict_last",
    "W_EVICT": "",
    "STATS_EVICT": "evict_last",
}
_TAIL = (rows.X_EVICT, _W_EVICT, rows.Y_CACHE, _MAX_BLOCK, rows.CHUNK, _STATS_EVICT)

FAMILIES: tuple[Family, ...] = (
    rows.tile_family(
        "rmsnorm",
        "multi-row",
        "a [ROWS, N] tile per program, fewer rows when M is too small to fill the GPU",
        "ROWS EPT MIN_PROGRAMS_PER_SM TILE_MAX MAX_WARPS MIN_WARPS CONST_N",
        _MULTI_ROW,
        _TAIL,
        {**_COMMON_START, "ROWS": 4},
    ),
    Family(
        op="rmsnorm",
        name="one-row-per-program",
        summary="one program per row, the whole row in registers (grid = M)",
        params=(rows.EPT, rows.MAX_WARPS, rows.MIN_WARPS, rows.CONST_N, *_TAIL),
        # 8 warps and an L2-kept weight: the fastest points of this grid on an H200
        start={**_COMMON_START, "MAX_WARPS": 8, "W_EVICT": "evict_last", "CONST_N": True},
        body=_ONE_ROW,
        valid=rows.warp_bounds,
    ),
    Family(
        op="rmsnorm",
        name="two-pass",
        summary="rows in chunks: a sum-of-squares pass that keeps the row in L2, then a "
        "normalize pass (short rows stay in registers)",
        params=(
            Param("CHUNK", (1024, 2048, 4096, 8192), resource=True),
            Param("MAX_BLOCK", (1024, 2048, 4096, 8192, 16384), resource=True),
            rows.EPT,
            _STATS_EVICT,
            rows.X_EVICT,
            rows.MAX_WARPS,
            rows.MIN_WARPS,
            _W_EVICT,
            rows.Y_CACHE,
            rows.CONST_N,
        ),
        # like inductor's looped reduction: 2048-element chunks, 16 warps, L2-hinted passes
        start={
            **_COMMON_START,
            "CHUNK": 2048,
            "MAX_BLOCK": 4096,
            "EPT": 4,
            "X_EVICT": "evict_first",
            "W_EVICT": "evict_last",
            "CONST_N": True,
        },
        body=_ONE_ROW,
        valid=rows.warp_bounds,
    ),
    rows.persistent_family("rmsnorm", _PERSISTENT, _TAIL, _COMMON_START),
)
