"""softmax templates: row softmax over the last dim of x [M, N], computed in fp32, as x.dtype.

Families: one-pass (a [ROWS, N] tile in registers, one read), persistent (a grid of a few
programs per SM looping over row tiles, the next tile prefetched), online (chunked online
max/sum: one read when the row fits a chunk, else a stats pass and a normalize pass), and
split-row (tiny M: each row split over several programs, partial max/sum combined).
Rows longer than MAX_BLOCK fall back to the online loop in the register-tile families.
"""

from __future__ import annotations

from kernelladder.ops import row_templates as rows
from kernelladder.ops.family import FOCUS_LARGE, FOCUS_SMALL, SM_COUNT_HELPER, Family, Param

_EXP2 = Param("EXP2", (True, False), doc="exp2 with a folded log2(e) instead of exp")
_MAX_BLOCK = rows.max_block("online loop")

_COMMON = (
    """
LOG2E = 1.4426950408889634


@triton.jit
def _exp(x, EXP2: tl.constexpr):
    if EXP2:
        y = tl.exp2(x * 1.4426950408889634)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def _softmax_online(X, Y, N, sxm, sxn, sym, syn,
                    CHUNK: tl.constexpr, SINGLE: tl.constexpr, EVEN: tl.constexpr,
                    WIDE: tl.constexpr, EXP2: tl.constexpr, STATS_EVICT: tl.constexpr,
                    X_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    row = tl.program_id(0)
    if WIDE:
        row = row.to(tl.int64)
    x_row = X + row * sxm
    y_row = Y + row * sym
    cols = tl.arange(0, CHUNK)
    if SINGLE:
        # the row fits one chunk: one read, the row stays in registers
        if EVEN:
            x = tl.load(x_row + cols * sxn, eviction_policy=X_EVICT).to(tl.float32)
        else:
            x = tl.load(x_row + cols * sxn, mask=cols < N, other=-float("inf"),
                        eviction_policy=X_EVICT).to(tl.float32)
        m = tl.max(x, axis=0)
        e = _exp(x - m, EXP2)
        y = (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty)
        if EVEN:
            tl.store(y_row + cols * syn, y, cache_modifier=Y_CACHE)
        else:
            tl.store(y_row + cols * syn, y, mask=cols < N, cache_modifier=Y_CACHE)
    else:
        m = tl.full([CHUNK], float("-inf"), tl.float32)
        s = tl.zeros([CHUNK], dtype=tl.float32)
        for start in range(0, N, CHUNK):
            c = start + cols
            x = tl.load(x_row + c * sxn, mask=c < N, other=-float("inf"),
                        eviction_policy=STATS_EVICT).to(tl.float32)
            m_new = tl.maximum(m, x)
            # lanes that have seen only padding keep a finite base (no inf - inf)
            base = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * _exp(m - base, EXP2) + _exp(x - base, EXP2)
            m = m_new
        m_row = tl.max(m, axis=0)
        s_row = tl.sum(s * _exp(m - m_row, EXP2), axis=0)
        inv = 1.0 / s_row
        for start in range(0, N, CHUNK):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c * sxn, mask=mask, other=0.0,
                        eviction_policy=X_EVICT).to(tl.float32)
            y = _exp(x - m_row, EXP2) * inv
            tl.store(y_row + c * syn, y.to(Y.dtype.element_ty), mask=mask,
                     cache_modifier=Y_CACHE)
"""
    + rows.WARPS_HELPERS
    + """

def _launch_online(x, y, M, N, chunk, stats_evict):
    block = min(chunk, triton.next_power_of_2(N))
    _softmax_online[(M,)](
        x, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        CHUNK=block, SINGLE=block >= N, EVEN=block == N, WIDE=_wide(x, y), EXP2=EXP2,
        STATS_EVICT=stats_evict, X_EVICT=X_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(block),
    )
"""
)

# The entry's start: rows longer than MAX_BLOCK go to the online loop.
_ENTRY = """

def kernel(x):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    if block > MAX_BLOCK:
        _launch_online(x, y, M, N, CHUNK, "evict_last")
        return y"""

_TILE_KERNEL = """
@triton.jit
def _load_rows(X, src, cols, N, sxm, sxn, EVEN_N: tl.constexpr, EVICT: tl.constexpr):
    # src rows are clamped into range by the caller: only columns need a mask
    ptrs = X + src[:, None] * sxm + cols[None, :] * sxn
    if EVEN_N:
        x = tl.load(ptrs, eviction_policy=EVICT)
    else:
        x = tl.load(ptrs, mask=(cols < N)[None, :], other=-float("inf"), eviction_policy=EVICT)
    return x


@triton.jit
def _store_rows(Y, y, rows, cols, M, N, sym, syn, EVEN_M: tl.constexpr,
                EVEN_N: tl.constexpr, CACHE: tl.constexpr):
    ptrs = Y + rows[:, None] * sym + cols[None, :] * syn
    if EVEN_N:
        if EVEN_M:
            tl.store(ptrs, y, cache_modifier=CACHE)
        else:
            tl.store(ptrs, y, mask=(rows < M)[:, None], cache_modifier=CACHE)
    else:
        tl.store(ptrs, y, mask=(rows < M)[:, None] & (cols < N)[None, :], cache_modifier=CACHE)


@triton.jit
def _softmax_rows(x, EXP2: tl.constexpr):
    m = tl.max(x, axis=1)
    e = _exp(x - m[:, None], EXP2)
    return e * (1.0 / tl.sum(e, axis=1))[:, None]


@triton.jit
def _softmax_tile(X, Y, M, N_ARG, sxm, sxn, sym, syn, N_CONST: tl.constexpr,
                  CONTIG: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr, EVEN_M: tl.constexpr,
                  EVEN_N: tl.constexpr, WIDE: tl.constexpr, EXP2: tl.constexpr,
                  X_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    # N_CONST > 0: the row length is compiled in, so masks are known; with CONTIG (dense
    # rows) a row starts at row * N_CONST, so its alignment is known and loads vectorize
    if N_CONST > 0:
        N = N_CONST
    else:
        N = N_ARG
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    # rows past M re-read the last row (no NaN from all-padding rows); never stored
    src = tl.minimum(rows, M - 1)
    if WIDE:
        rows = rows.to(tl.int64)
        src = src.to(tl.int64)
    if CONTIG:
        x = _load_rows(X, src, cols, N, N, 1, EVEN_N, X_EVICT).to(tl.float32)
    else:
        x = _load_rows(X, src, cols, N, sxm, sxn, EVEN_N, X_EVICT).to(tl.float32)
    y = _softmax_rows(x, EXP2).to(Y.dtype.element_ty)
    if CONTIG:
        _store_rows(Y, y, rows, cols, M, N, N, 1, EVEN_M, EVEN_N, Y_CACHE)
    else:
        _store_rows(Y, y, rows, cols, M, N, sym, syn, EVEN_M, EVEN_N, Y_CACHE)
"""

_ONE_PASS = (
    _COMMON
    + _TILE_KERNEL
    + SM_COUNT_HELPER
    + rows.ROWS_PER_PROGRAM
    + _ENTRY
    + """
    rows = _rows_per_program(M, block, _num_sms(x.device))
    contig = bool(CONST_N) and x.is_contiguous() and y.is_contiguous()
    _softmax_tile[(triton.cdiv(M, rows),)](
        x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        N_CONST=N if CONST_N else 0, CONTIG=contig, ROWS=rows, BLOCK=block, EVEN_M=M % rows == 0, EVEN_N=block == N, WIDE=_wide(x, y),
        EXP2=EXP2, X_EVICT=X_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(rows * block),
    )
    return y
"""
)

_PERSISTENT = (
    _COMMON
    + _TILE_KERNEL
    + """
@triton.jit
def _softmax_persistent(X, Y, M, N, sxm, sxn, sym, syn,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr, PREFETCH: tl.constexpr,
                        EVEN_N: tl.constexpr, WIDE: tl.constexpr, EXP2: tl.constexpr,
                        X_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    tiles = tl.cdiv(M, ROWS)
    cols = tl.arange(0, BLOCK)
    lane = tl.arange(0, ROWS)
    if PREFETCH:
        src = tl.minimum(pid * ROWS + lane, M - 1)
        if WIDE:
            src = src.to(tl.int64)
        x_next = _load_rows(X, src, cols, N, sxm, sxn, EVEN_N, X_EVICT)
    for tile in range(pid, tiles, nprog):
        rows = tile * ROWS + lane
        if PREFETCH:
            x = x_next.to(tl.float32)
            # issue the next tile's loads before reducing this one
            nsrc = tl.minimum((tile + nprog) * ROWS + lane, M - 1)
            if WIDE:
                nsrc = nsrc.to(tl.int64)
            x_next = _load_rows(X, nsrc, cols, N, sxm, sxn, EVEN_N, X_EVICT)
        else:
            src = tl.minimum(rows, M - 1)
            if WIDE:
                src = src.to(tl.int64)
            x = _load_rows(X, src, cols, N, sxm, sxn, EVEN_N, X_EVICT).to(tl.float32)
        if WIDE:
            rows = rows.to(tl.int64)
        y = _softmax_rows(x, EXP2)
        _store_rows(Y, y.to(Y.dtype.element_ty), rows, cols, M, N, sym, syn, False, EVEN_N,
                    Y_CACHE)
"""
    + SM_COUNT_HELPER
    + _ENTRY
    + """
    rows = max(1, min(ROWS, 16384 // block))
    tiles = triton.cdiv(M, rows)
    programs = max(1, min(tiles, _num_sms(x.device) * PROGRAMS_PER_SM))
    _softmax_persistent[(programs,)](
        x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        ROWS=rows, BLOCK=block, PREFETCH=PREFETCH, EVEN_N=block == N, WIDE=_wide(x, y),
        EXP2=EXP2, X_EVICT=X_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(rows * block),
    )
    return y
"""
)

_ONLINE = (
    _COMMON
    + """

def kernel(x):
    M, N = x.shape
    y = torch.empty_like(x)
    _launch_online(x, y, M, N, CHUNK, STATS_EVICT)
    return y
"""
)

_SPLIT_ROW = (
    _COMMON
    + """
@triton.jit
def _softmax_partial(X, WS_M, WS_S, N, sxm, sxn, SPLIT,
                     SEG: tl.constexpr, EXP2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    cols = part * SEG + tl.arange(0, SEG)
    # keep the segment in L2 for the second kernel
    x = tl.load(X + row * sxm + cols * sxn, mask=cols < N, other=-float("inf"),
                eviction_policy="evict_last").to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(_exp(x - m, EXP2), axis=0)
    tl.store(WS_M + row * SPLIT + part, m)
    tl.store(WS_S + row * SPLIT + part, s)


@triton.jit
def _softmax_finish(X, Y, WS_M, WS_S, N, sxm, sxn, sym, syn, SPLIT,
                    SEG: tl.constexpr, SPLIT_BLOCK: tl.constexpr, EXP2: tl.constexpr,
                    X_EVICT: tl.constexpr, Y_CACHE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    parts = tl.arange(0, SPLIT_BLOCK)
    pmask = parts < SPLIT
    pm = tl.load(WS_M + row * SPLIT + parts, mask=pmask, other=-float("inf"))
    ps = tl.load(WS_S + row * SPLIT + parts, mask=pmask, other=0.0)
    m = tl.max(pm, axis=0)
    s = tl.sum(ps * _exp(pm - m, EXP2), axis=0)
    cols = part * SEG + tl.arange(0, SEG)
    mask = cols < N
    x = tl.load(X + row * sxm + cols * sxn, mask=mask, other=0.0,
                eviction_policy=X_EVICT).to(tl.float32)
    y = _exp(x - m, EXP2) / s
    tl.store(Y + row * sym + cols * syn, y.to(Y.dtype.element_ty), mask=mask,
             cache_modifier=Y_CACHE)
"""
    + SM_COUNT_HELPER
    + """

def kernel(x):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    split = triton.cdiv(N, SEGMENT)
    if split <= 1 or M >= _num_sms(x.device) * SPLIT_BELOW_ROWS_PER_SM:
        # enough rows to fill the GPU: one program per row
        chunk = block if block <= MAX_BLOCK else CHUNK
        _launch_online(x, y, M, N, chunk, "evict_last")
        return y
    ws_m = torch.empty((M, split), dtype=torch.float32, device=x.device)
    ws_s = torch.empty((M, split), dtype=torch.float32, device=x.device)
    warps = _warps(SEGMENT)
    _softmax_partial[(M, split)](
        x, ws_m, ws_s, N, x.stride(0), x.stride(1), split,
        SEG=SEGMENT, EXP2=EXP2, num_warps=warps,
    )
    _softmax_finish[(M, split)](
        x, y, ws_m, ws_s, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), split,
        SEG=SEGMENT, SPLIT_BLOCK=triton.next_power_of_2(split), EXP2=EXP2,
        X_EVICT=X_EVICT, Y_CACHE=Y_CACHE, num_warps=warps,
    )
    return y
"""
)

_COMMON_START = {**rows.START, "MAX_WARPS": 8, "EXP2": True, "X_EVICT": ""}
_TAIL = (_EXP2, rows.X_EVICT, rows.Y_CACHE, _MAX_BLOCK, rows.CHUNK)

FAMILIES: tuple[Family, ...] = (
    rows.tile_family(
        "softmax",
        "one-pass",
        "a [ROWS, N] tile per program in registers: one read, one write",
        "EPT MAX_WARPS ROWS MIN_WARPS MIN_PROGRAMS_PER_SM TILE_MAX CONST_N",
        _ONE_PASS,
        _TAIL,
        {**_COMMON_START, "ROWS": 1},
    ),
    Family(
        op="softmax",
        name="online",
        summary="chunked online max/sum, one row per program (one read when the row fits)",
        params=(
            Param("CHUNK", (1024, 2048, 4096, 8192, 16384), resource=True),
            rows.EPT,
            Param("STATS_EVICT", ("", "evict_last"), focus=FOCUS_LARGE),
            rows.MAX_WARPS,
            rows.MIN_WARPS,
            _EXP2,
            rows.X_EVICT,
            rows.Y_CACHE,
        ),
        start={**_COMMON_START, "CHUNK": 8192, "STATS_EVICT": "evict_last"},
        body=_ONLINE,
        valid=rows.warp_bounds,
    ),
    rows.persistent_family("softmax", _PERSISTENT, _TAIL, _COMMON_START),
    Family(
        op="softmax",
        name="split-row",
        summary="tiny M: each row split over programs, partial max/sum combined in a 2nd kernel",
        params=(
            Param("SEGMENT", (1024, 2048, 4096, 8192), resource=True, focus=FOCUS_SMALL),
            Param("SPLIT_BELOW_ROWS_PER_SM", (1, 2, 4, 8), focus=FOCUS_SMALL),
            rows.EPT,
            rows.MAX_WARPS,
            rows.MIN_WARPS,
            *_TAIL,
        ),
        start={**_COMMON_START, "SEGMENT": 2048, "SPLIT_BELOW_ROWS_PER_SM": 2},
        body=_SPLIT_ROW,
        valid=rows.warp_bounds,
    ),
)
