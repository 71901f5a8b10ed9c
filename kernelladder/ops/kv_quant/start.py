"""Starting candidate for kv_quant: a block of (t, h) rows per program, the whole row of D
in registers, fp32 math."""

import torch
import triton
import triton.language as tl

# Adding then subtracting 1.5 * 2^23 rounds an fp32 |r| < 2^22 to the nearest integer,
# ties to even (IEEE round-to-nearest-even on the add), exactly as torch.round does.
# (constexpr: a jitted function may read only constexpr globals)
ROUND_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _kv_quant_rows(
    X,
    Q,
    SCALE,
    n_rows,
    H,
    D,
    sxt,
    sxh,
    sxd,
    sqt,
    sqh,
    sqd,
    sst,
    ssh,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    t = rows // H
    h = rows % H
    mask = row_ok[:, None] & (cols[None, :] < D)
    x = tl.load(X + (t * sxt + h * sxh)[:, None] + cols[None, :] * sxd, mask=mask, other=0.0)
    x = x.to(tl.float32)
    absmax = tl.max(tl.abs(x), axis=1)
    scale = tl.where(absmax == 0.0, 1.0, absmax / 127.0)
    r = x / scale[:, None]
    r = (r + ROUND_MAGIC) - ROUND_MAGIC
    r = tl.minimum(tl.maximum(r, -127.0), 127.0)
    tl.store(Q + (t * sqt + h * sqh)[:, None] + cols[None, :] * sqd, r.to(tl.int8), mask=mask)
    tl.store(SCALE + t * sst + h * ssh, scale, mask=row_ok)


def kernel(x):
    t, h, d = x.shape
    q = torch.empty((t, h, d), dtype=torch.int8, device=x.device)
    scale = torch.empty((t, h), dtype=torch.float32, device=x.device)
    n_rows = t * h
    block_d = triton.next_power_of_2(d)
    rows = max(1, min(16, 4096 // block_d))
    _kv_quant_rows[(triton.cdiv(n_rows, rows),)](
        x,
        q,
        scale,
        n_rows,
        h,
        d,
        *x.stride(),
        *q.stride(),
        *scale.stride(),
        ROWS=rows,
        BLOCK_D=block_d,
        num_warps=4,
    )
    return q, scale
