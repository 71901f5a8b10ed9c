# kernelladder-search: {"family":"persistent","op":"rmsnorm","params":{"CHUNK":4096,"EPT":16,"MAX_BLOCK":16384,"MAX_WARPS":16,"MIN_WARPS":4,"PREFETCH":true,"PROGRAMS_PER_SM":8,"ROWS":1,"STATS_EVICT":"evict_last","W_EVICT":"","X_EVICT":"","Y_CACHE":""}}
"""rmsnorm, search family "persistent": a persistent grid (SMs x PROGRAMS_PER_SM) looping over row tiles

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
PROGRAMS_PER_SM = 8
PREFETCH = True
ROWS = 1
EPT = 16
MAX_WARPS = 16
MIN_WARPS = 4
X_EVICT = ''
W_EVICT = ''
Y_CACHE = ''
MAX_BLOCK = 16384
CHUNK = 4096
STATS_EVICT = 'evict_last'

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


def _warps(elements):
    return max(MIN_WARPS, min(MAX_WARPS, elements // (32 * EPT)))


def _wide(*tensors):
    # 64-bit offsets only when an element offset can pass 2**31
    return any(sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31 - 1
               for t in tensors)


def _launch_chunked(x, weight, y, M, N):
    block = min(CHUNK, triton.next_power_of_2(N))
    _rmsnorm_chunked[(M,)](
        x, weight, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        CHUNK=block, STATS_EVICT=STATS_EVICT, X_EVICT=X_EVICT, W_EVICT=W_EVICT,
        Y_CACHE=Y_CACHE, num_warps=_warps(block),
    )

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


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    if block > MAX_BLOCK:
        _launch_chunked(x, weight, y, M, N)
        return y
    rows = max(1, min(ROWS, 16384 // block))
    tiles = triton.cdiv(M, rows)
    programs = max(1, min(tiles, _num_sms(x.device) * PROGRAMS_PER_SM))
    _rmsnorm_persistent[(programs,)](
        x, weight, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        ROWS=rows, BLOCK=block, PREFETCH=PREFETCH, EVEN_N=block == N, WIDE=_wide(x, y),
        X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(rows * block),
    )
    return y
