# kernelladder-search: {"family":"one-row-per-program","op":"kv_quant","params":{"NUM_WARPS":2,"QDIV":"rcp","Q_CACHE":".cs","X_EVICT":""}}
"""kv_quant, search family "one-row-per-program": one program per row of D (grid = T * H), the plain layout

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
NUM_WARPS = 2
QDIV = 'rcp'
X_EVICT = ''
Q_CACHE = '.cs'
ROWS = 1  # fixed by the family
MIN_PROGRAMS_PER_SM = 1  # fixed by the family

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
    T, H, D = x.shape
    q = torch.empty((T, H, D), dtype=torch.int8, device=x.device)
    scale = torch.empty((T, H), dtype=torch.float32, device=x.device)
    R = T * H
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
