# kernelladder-search: {"family":"one-row-per-program","op":"rmsnorm","params":{"CHUNK":4096,"CONST_N":true,"EPT":32,"MAX_BLOCK":16384,"MAX_WARPS":8,"MIN_WARPS":4,"STATS_EVICT":"evict_last","W_EVICT":"evict_last","X_EVICT":"evict_last","Y_CACHE":""}}
"""rmsnorm, search family "one-row-per-program": one program per row, the whole row in registers (grid = M)

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
EPT = 32
MAX_WARPS = 8
MIN_WARPS = 4
CONST_N = True
X_EVICT = 'evict_last'
W_EVICT = 'evict_last'
Y_CACHE = ''
MAX_BLOCK = 16384
CHUNK = 4096
STATS_EVICT = 'evict_last'

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


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    if block > MAX_BLOCK:
        _launch_chunked(x, weight, y, M, N)
        return y
    _rmsnorm_row[(M,)](
        x, weight, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), 1e-6,
        N_CONST=N if CONST_N else 0, CONTIG=_contig(x, y), BLOCK=block, EVEN=block == N,
        WIDE=_wide(x, y), X_EVICT=X_EVICT, W_EVICT=W_EVICT, Y_CACHE=Y_CACHE,
        num_warps=_warps(block),
    )
    return y
