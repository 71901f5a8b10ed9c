"""Starting candidate for attention: a plain causal flash-attention forward.

One program per (query block, batch*head); online softmax in fp32 with exp2; q k^T and
P v on tensor cores with the input dtype (bf16/fp16) and fp32 accumulation.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    O,
    sqb,
    sqh,
    sqs,
    sqd,
    skb,
    skh,
    sks,
    skd,
    svb,
    svh,
    svs,
    svd,
    sob,
    soh,
    sos,
    sod,
    H,
    S,
    qk_scale,
    HEAD_D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_D
    m_ok = offs_m < S

    q = tl.load(
        Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
        mask=m_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Causal: this query block sees keys [0, end of the block).
    hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        n_ok = cols < S
        k = tl.load(
            K + b * skb + h * skh + cols[None, :] * sks + offs_d[:, None] * skd,
            mask=n_ok[None, :] & d_ok[:, None],
            other=0.0,
        )
        s = tl.dot(q, k) * qk_scale  # log2 domain: qk_scale = log2(e) / sqrt(D)
        keep = (offs_m[:, None] >= cols[None, :]) & n_ok[None, :]
        s = tl.where(keep, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            V + b * svb + h * svh + cols[:, None] * svs + offs_d[None, :] * svd,
            mask=n_ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(
        O + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :] * sod,
        out.to(O.dtype.element_ty),
        mask=m_ok[:, None] & d_ok[None, :],
    )


def kernel(q, k, v):
    b, h, s, d = q.shape
    o = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)
    block_d = max(16, triton.next_power_of_2(d))
    block_m = min(128, max(16, triton.next_power_of_2(s)))
    block_n = min(64, block_m)
    num_warps = 8 if block_m * block_d >= 128 * 128 else 4
    grid = (triton.cdiv(s, block_m), b * h)
    _attn_fwd[grid](
        q,
        k,
        v,
        o,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *o.stride(),
        h,
        s,
        math.log2(math.e) / math.sqrt(d),
        HEAD_D=d,
        BLOCK_D=block_d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=2,
    )
    return o
