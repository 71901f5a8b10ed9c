# kernelladder-search: {"family":"split-row","op":"softmax","params":{"CHUNK":4096,"EPT":32,"EXP2":true,"MAX_BLOCK":16384,"MAX_WARPS":8,"MIN_WARPS":4,"SEGMENT":4096,"SPLIT_BELOW_ROWS_PER_SM":2,"X_EVICT":"","Y_CACHE":""}}
"""softmax, search family "split-row": tiny M: each row split over programs, partial max/sum combined in a 2nd kernel

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
SEGMENT = 4096
SPLIT_BELOW_ROWS_PER_SM = 2
EPT = 32
MAX_WARPS = 8
MIN_WARPS = 4
EXP2 = True
X_EVICT = ''
Y_CACHE = ''
MAX_BLOCK = 16384
CHUNK = 4096

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


def _warps(elements):
    return max(MIN_WARPS, min(MAX_WARPS, elements // (32 * EPT)))


def _wide(*tensors):
    # 64-bit offsets only when an element offset can pass 2**31
    return any(sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31 - 1
               for t in tensors)


def _launch_online(x, y, M, N, chunk, stats_evict):
    block = min(chunk, triton.next_power_of_2(N))
    _softmax_online[(M,)](
        x, y, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        CHUNK=block, SINGLE=block >= N, EVEN=block == N, WIDE=_wide(x, y), EXP2=EXP2,
        STATS_EVICT=stats_evict, X_EVICT=X_EVICT, Y_CACHE=Y_CACHE, num_warps=_warps(block),
    )

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
