"""attention's pointer flash kernel and the TMA kernel of flash-tma, as template text.

The pointer kernel (`POINTER_KERNELS`: a BLOCK_M block of queries per program streams
BLOCK_N blocks of keys/values with an online softmax, skipping the blocks above the
diagonal) is every attention family's fallback where its own path cannot run; the
flash-split, flash-masked and flash-lpt families are it alone (`POINTER_BODY`).
`TMA_BODY` loads the blocks through tensor descriptors instead.
"""

POINTER_KERNELS = """
@triton.jit
def _attn_block(acc, l_i, m_i, q, K, V, start_n, offs_m, offs_n, offs_d, S,
                sks, skd, svs, svd, qk_scale, D: tl.constexpr, EVEN_D: tl.constexpr,
                MASKED: tl.constexpr, EXP2: tl.constexpr):
    cols = start_n + offs_n
    if MASKED:
        kv_mask = (cols < S)[:, None]
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d < D)[None, :]
        k = tl.load(K + cols[:, None] * sks + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
        v = tl.load(V + cols[:, None] * svs + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(K + cols[:, None] * sks + offs_d[None, :] * skd)
        v = tl.load(V + cols[:, None] * svs + offs_d[None, :] * svd)
    else:
        d_mask = (offs_d < D)[None, :]
        k = tl.load(K + cols[:, None] * sks + offs_d[None, :] * skd, mask=d_mask, other=0.0)
        v = tl.load(V + cols[:, None] * svs + offs_d[None, :] * svd, mask=d_mask, other=0.0)
    qk = tl.dot(q, tl.trans(k)) * qk_scale
    if MASKED:
        keep = (cols[None, :] <= offs_m[:, None]) & (cols < S)[None, :]
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, axis=1))
    if EXP2:
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
    else:
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def _attn_fwd(Q, K, V, O, sm_scale, H, S,
              sqb, sqh, sqs, sqd, skb, skh, sks, skd,
              svb, svh, svs, svd, sob, soh, sos, sod,
              D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr, SPLIT_DIAG: tl.constexpr,
              REVERSE: tl.constexpr, EXP2: tl.constexpr):
    pid_m = tl.program_id(0)
    if REVERSE:
        # the last query blocks see the most keys: start them first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q_base = Q + b * sqb + h * sqh
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    o_base = O + b * sob + h * soh
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    io_mask = (offs_m < S)[:, None] & (offs_d < D)[None, :]
    q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :] * sqd, mask=io_mask, other=0.0)
    if EXP2:
        qk_scale = sm_scale * 1.4426950408889634
    else:
        qk_scale = sm_scale
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    lo = 0
    if SPLIT_DIAG:
        # key blocks entirely below the diagonal need no mask
        for start_n in range(0, start_m, BLOCK_N):
            acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m,
                                        offs_n, offs_d, S, sks, skd, svs, svd, qk_scale,
                                        D, EVEN_D, False, EXP2)
        lo = start_m
    hi = tl.minimum(start_m + BLOCK_M, S)
    for start_n in range(lo, hi, BLOCK_N):
        acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m,
                                    offs_n, offs_d, S, sks, skd, svs, svd, qk_scale,
                                    D, EVEN_D, True, EXP2)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :] * sod,
             out.to(O.dtype.element_ty), mask=io_mask)


def _launch_pointers(q, k, v, o, block_m, block_n, block_d):
    B, H, S, D = q.shape
    grid = (triton.cdiv(S, block_m), B * H)
    _attn_fwd[grid](
        q, k, v, o, 1.0 / (D ** 0.5), H, S,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        D=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, EVEN_D=block_d == D,
        SPLIT_DIAG=SPLIT_DIAG,
        REVERSE=REVERSE, EXP2=EXP2, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )


def _blocks(S, D):
    # tl.dot needs 16 rows at least; tiny sequences do not need 128-row blocks
    block_m = min(BLOCK_M, max(16, triton.next_power_of_2(S)))
    return block_m, min(BLOCK_N, block_m), max(16, triton.next_power_of_2(D))
"""

POINTER_BODY = (
    POINTER_KERNELS
    + """

def kernel(q, k, v):
    o = torch.empty_like(q)
    _launch_pointers(q, k, v, o, *_blocks(q.shape[2], q.shape[3]))
    return o
"""
)

DESCRIPTOR_HELPERS = """try:  # host-side tensor descriptors (TMA on Hopper and later; emulated by the interpreter)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    TensorDescriptor = None


def _tma_ok(q, k, v):
    # dense [B, H, S, D] tensors whose rows start on 16 bytes: what a descriptor needs
    return TensorDescriptor is not None and all(
        t.is_contiguous() and t.data_ptr() % 16 == 0 and (t.shape[3] * t.element_size()) % 16 == 0
        for t in (q, k, v)
    )
"""

TMA_BODY = (
    POINTER_KERNELS
    + """

@triton.jit
def _tma_block(acc, l_i, m_i, q, k_desc, v_desc, row0, start_n, offs_m, offs_n, S, qk_scale,
               MASKED: tl.constexpr):
    # rows of K and V past this head's S (the next head's, or zeros past the tensor's
    # end) are masked to -inf in qk, so their p is 0
    k = k_desc.load([row0 + start_n, 0])
    v = v_desc.load([row0 + start_n, 0])
    qk = tl.dot(q, tl.trans(k))
    if MASKED:
        cols = start_n + offs_n
        keep = (cols[None, :] <= offs_m[:, None]) & (cols < S)[None, :]
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
    else:
        # the scale folded into the exponent's argument: one multiply-add per score
        m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _attn_fwd_tma(q_desc, k_desc, v_desc, O, sm_scale, H, S, sob, soh, sos, sod,
                  D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, REVERSE: tl.constexpr):
    # q, k, v seen as [B * H * S, D]: a (batch, head) is S consecutive rows from row0
    pid_m = tl.program_id(0)
    if REVERSE:
        # a head's last query blocks see the most keys: start them first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    row0 = bh * S
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = q_desc.load([row0 + start_m, 0])
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(0, start_m, BLOCK_N):
        acc, l_i, m_i = _tma_block(acc, l_i, m_i, q, k_desc, v_desc, row0, start_n, offs_m,
                                   offs_n, S, qk_scale, False)
    for start_n in range(start_m, tl.minimum(start_m + BLOCK_M, S), BLOCK_N):
        acc, l_i, m_i = _tma_block(acc, l_i, m_i, q, k_desc, v_desc, row0, start_n, offs_m,
                                   offs_n, S, qk_scale, True)
    out = acc / l_i[:, None]
    o_base = O + (bh // H).to(tl.int64) * sob + (bh % H).to(tl.int64) * soh
    io_mask = (offs_m < S)[:, None] & (offs_d < D)[None, :]
    tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :] * sod,
             out.to(O.dtype.element_ty), mask=io_mask)


"""
    + DESCRIPTOR_HELPERS
    + """

def kernel(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    block_m, block_n, block_d = _blocks(S, D)
    if not _tma_ok(q, k, v):
        _launch_pointers(q, k, v, o, block_m, block_n, block_d)
        return o
    descs = [
        TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, block_d])
        for t, rows in ((q, block_m), (k, block_n), (v, block_n))
    ]
    _attn_fwd_tma[(triton.cdiv(S, block_m), B * H)](
        *descs, o, 1.0 / (D ** 0.5), H, S, *o.stride(),
        D=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, REVERSE=REVERSE,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return o
"""
)
