# kernelladder-search: {"family":"multi-row","op":"rmsnorm","params":{"CHUNK":4096,"CONST_N":true,"EPT":8,"MAX_BLOCK":16384,"MAX_WARPS":16,"MIN_PROGRAMS_PER_SM":4,"MIN_WARPS":4,"ROWS":8,"STATS_EVICT":"evict_last","TILE_MAX":16384,"W_EVICT":"","X_EVICT":"evict_last","Y_CACHE":""}}
"""rmsnorm, search family "multi-row": a [ROWS, N] tile per program, fewer rows when M is too small to fill the GPU

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
ROWS = 8
EPT = 8
MIN_PROGRAMS_PER_SM = 4
TILE_MAX = 16384
MAX_WARPS = 16
MIN_WARPS = 4
CONST_N = True
X_EVICT = 'evict_last'
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


def _contig(x, y):
    # rows addressed as row * N (a compile-time N) when both tensors are dense
    return bool(CONST_N) and x.is_contiguous() and y.is_contiguous()

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


def _rows_per_program(M, block, sms):
    rows = max(1, min(ROWS, TILE_MAX // block))
    # small M: keep enough programs to fill the GPU rather than packing rows
    while rows > 1 and triton.cdiv(M, rows) < sms * MIN_PROGRAMS_PER_SM:
        rows //= 2
    return rows


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    if block > MAX_BLOCK:
        _launch_chunked(x, weight, y, M, N)
        return y
    rows = _rows_per_program(M, block, _num_sms(x.device))
    _rmsnorm_tile[(triton.cdiv(M, rows),)](
        x, weight, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        N_CONST=N if CONST_N else 0, CONTIG=_contig(x, y), ROWS=rows, BLOCK=block,
        EVEN_M=M % rows == 0, EVEN_N=block == N,
        WIDE=_wide(x, y), X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE,
        num_warps=_warps(rows * block),
    )
    return y
