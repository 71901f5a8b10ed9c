"""attention templates: causal softmax(q k^T / sqrt(D)) v for q, k, v [B, H, S, D].

Flash-attention forward: a BLOCK_M block of queries per program streams BLOCK_N blocks of
keys/values with an online softmax (fp32 statistics and accumulator, tl.dot in the input
dtype), skipping the key blocks above the diagonal. Families differ in how the diagonal is
handled, in which query blocks run first, in how blocks are loaded (pointers, or
tensor descriptors: TMA on Hopper), in how the K/V loop is pipelined (a `tl.range` ring,
warp specialisation) and in whether programs are persistent. NOTES (at the end) is what
the api/code prompts are told of them, including which code paths only the GPU runs.
"""

from __future__ import annotations

from kernelladder.ops.attention.notes import NOTES as NOTES  # knowledge
from kernelladder.ops.attention.wgmma import GLUON_KERNELS
from kernelladder.ops.family import SM_COUNT_HELPER, Family, Param

_BLOCK_M = Param("BLOCK_M", (64, 128), resource=True)
_BLOCK_N = Param("BLOCK_N", (32, 64, 128), resource=True)
_WARPS = Param("NUM_WARPS", (4, 8), resource=True)
_STAGES = Param("NUM_STAGES", (1, 2, 3, 4), resource=True)
# fewer query rows on fewer warps (or more on more) as one step: from 128 rows on 8 warps,
# 64 on 4 takes 11 % less time with tensor descriptors on the H200; each alone is slower
_LINKS = (("BLOCK_M", "NUM_WARPS"),)
_EXP2 = Param("EXP2", (True, False), doc="exp2 with log2(e) folded into the scale")
# a head's last query blocks first: on the H200 at B1 H8 S4096 D128 0.1037 ms against
# 0.1055, no change at B4 H32 S2048 (bench/attention_probe.py, 2026-11-30)
_REVERSE = Param("REVERSE", (False, True), doc="the longest query blocks of a head first")

_KERNELS = """
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

_BODY = (
    _KERNELS
    + """

def kernel(q, k, v):
    o = torch.empty_like(q)
    _launch_pointers(q, k, v, o, *_blocks(q.shape[2], q.shape[3]))
    return o
"""
)

_DESCRIPTOR_HELPERS = """try:  # host-side tensor descriptors (TMA on Hopper and later; emulated by the interpreter)
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

_TMA_BODY = (
    _KERNELS
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
    + _DESCRIPTOR_HELPERS
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


# --- Hopper families: one tile routine, launched per tile or by persistent programs ---------
# Every K/V loop is a `tl.range` with its own software-pipeline depth (NUM_STAGES: the ring
# of K/V blocks in flight); with WS the unmasked loop takes Triton's automatic warp
# specialisation (producer warps issue the TMA loads, consumer warps the dots). The interpreter runs these loops as
# plain ranges: the pipeline depth and WS change nothing on the CPU and are exercised only
# on the GPU; everything else (descriptor loads, the two stages, the tile order, the
# full-tile descriptor store and the pointer store of a tail tile) runs in the interpreter.
_HOPPER_KERNELS = """

@triton.jit
def _ring_stage(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, offs_n, S, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, STAGES: tl.constexpr,
                WS: tl.constexpr):
    # key blocks lo..hi of one query tile; rows of K and V past this head's S (the next
    # head's, or zeros past the tensor's end) only reach the masked stage, where they are -inf
    for start_n in tl.range(lo, hi, BLOCK_N, num_stages=STAGES, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([row0 + start_n, 0])
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            cols = start_n + offs_n
            keep = (cols[None, :] <= offs_m[:, None]) & (cols < S)[None, :]
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            p = tl.exp2(qk - m_new[:, None])
        else:
            # below the diagonal: no mask, and log2(e) / sqrt(D) folded into one multiply-add
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
            p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = v_desc.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _ring_tile(q_desc, k_desc, v_desc, o_desc, O, bh, pid_m, H, S, sob, soh, sos, sod,
               qk_scale, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr):
    # one (batch * head, query tile); q, k, v, o seen as [B * H * S, D]
    row0 = bh * S
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([row0 + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # the masked stage starts at the key block holding this tile's first diagonal key
    # (start_m itself when BLOCK_N divides BLOCK_M; earlier when a key block is wider)
    diag = (start_m // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _ring_stage(acc, l_i, m_i, q, k_desc, v_desc, row0, 0, diag, offs_m,
                                offs_n, S, qk_scale, BLOCK_N, False, STAGES, WS)
    # the diagonal's one or two blocks: not worth a producer/consumer split
    acc, l_i, m_i = _ring_stage(acc, l_i, m_i, q, k_desc, v_desc, row0, diag,
                                tl.minimum(start_m + BLOCK_M, S), offs_m, offs_n, S,
                                qk_scale, BLOCK_N, True, STAGES, False)
    # deferred normalisation: one reciprocal per row, once, after the last key block
    out = (acc * (1.0 / l_i)[:, None]).to(O.dtype.element_ty)
    if start_m + BLOCK_M <= S:
        o_desc.store([row0 + start_m, 0], out)
    else:
        # a tail tile: a descriptor store of the flat view would write the next head's rows
        offs_d = tl.arange(0, BLOCK_D)
        o_base = O + (bh // H).to(tl.int64) * sob + (bh % H).to(tl.int64) * soh
        io_mask = (offs_m < S)[:, None] & (offs_d < D)[None, :]
        tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :] * sod, out, mask=io_mask)


@triton.jit
def _tile_of(t, BH, N_M, GROUP: tl.constexpr):
    # tile t of the launch order: heads in groups of GROUP (whose K and V stay in L2
    # together; the last group may be smaller), and inside a group every head's last
    # (longest) query tile first, then the one before, down to the first
    per_group = GROUP * N_M
    g = t // per_group
    r = t % per_group
    heads = tl.minimum(BH - g * GROUP, GROUP)
    return g * GROUP + r % heads, N_M - 1 - r // heads


@triton.jit
def _as_desc(t, rows, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
             IN_KERNEL: tl.constexpr):
    # a descriptor made on the device (t a pointer to [rows, D]), or the host's as given
    if IN_KERNEL:
        return tl.make_tensor_descriptor(t, shape=[rows, D], strides=[D, 1],
                                         block_shape=[BLOCK_R, BLOCK_D])
    else:
        return t


@triton.jit
def _attn_fwd_ring(q_desc, k_desc, v_desc, o_desc, O, sm_scale, H, S, BH, N_M,
                   sob, soh, sos, sod, D: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                   WS: tl.constexpr, GROUP: tl.constexpr):
    # warp specialisation on Hopper takes descriptors made on the device (Triton's
    # tutorial switches to them there); otherwise the host's come in
    rows = BH * S
    q_desc = _as_desc(q_desc, rows, D, BLOCK_M, BLOCK_D, WS)
    k_desc = _as_desc(k_desc, rows, D, BLOCK_N, BLOCK_D, WS)
    v_desc = _as_desc(v_desc, rows, D, BLOCK_N, BLOCK_D, WS)
    o_desc = _as_desc(o_desc, rows, D, BLOCK_M, BLOCK_D, WS)
    bh, pid_m = _tile_of(tl.program_id(0), BH, N_M, GROUP)
    _ring_tile(q_desc, k_desc, v_desc, o_desc, O, bh, pid_m, H, S, sob, soh, sos, sod,
               sm_scale * 1.4426950408889634, D, BLOCK_D, BLOCK_M, BLOCK_N, STAGES, WS)


@triton.jit
def _attn_fwd_persistent(q_desc, k_desc, v_desc, o_desc, O, sm_scale, H, S, BH, N_M,
                         sob, soh, sos, sod, D: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                         WS_INNER: tl.constexpr, WS_OUTER: tl.constexpr,
                         DEVICE_DESC: tl.constexpr, GROUP: tl.constexpr):
    # program p takes tiles p, p + P, ... of the launch order (_tile_of): the long tiles go
    # out first, the short ones fill in
    qk_scale = sm_scale * 1.4426950408889634
    rows = BH * S
    q_desc = _as_desc(q_desc, rows, D, BLOCK_M, BLOCK_D, DEVICE_DESC)
    k_desc = _as_desc(k_desc, rows, D, BLOCK_N, BLOCK_D, DEVICE_DESC)
    v_desc = _as_desc(v_desc, rows, D, BLOCK_N, BLOCK_D, DEVICE_DESC)
    o_desc = _as_desc(o_desc, rows, D, BLOCK_M, BLOCK_D, DEVICE_DESC)
    for t in tl.range(tl.program_id(0), N_M * BH, tl.num_programs(0), warp_specialize=WS_OUTER):
        bh, pid_m = _tile_of(t, BH, N_M, GROUP)
        _ring_tile(q_desc, k_desc, v_desc, o_desc, O, bh, pid_m, H, S, sob, soh, sos, sod,
                   qk_scale, D, BLOCK_D, BLOCK_M, BLOCK_N, STAGES, WS_INNER)


def _ring_blocks(S, D):
    # key blocks may be wider than query tiles here; neither wider than the sequence needs
    span = max(16, triton.next_power_of_2(S))
    return min(BLOCK_M, span), min(BLOCK_N, span), max(16, triton.next_power_of_2(D))


def _ring_descriptors(q, k, v, o, block_m, block_n, block_d, in_kernel):
    B, H, S, D = q.shape
    if in_kernel:  # the kernel makes them; their scratch comes from this allocator
        if q.is_cuda:
            triton.set_allocator(_descriptor_scratch)
        return [q, k, v, o]
    return [
        TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, block_d])
        for t, rows in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))
    ]


def _descriptor_scratch(size, alignment, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)
"""

_RING_BODY = (
    _KERNELS
    + _HOPPER_KERNELS
    + "\n\n"
    + _DESCRIPTOR_HELPERS
    + """

def kernel(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    if not _tma_ok(q, k, v):
        _launch_pointers(q, k, v, o, *_blocks(S, D))
        return o
    block_m, block_n, block_d = _ring_blocks(S, D)
    n_m = triton.cdiv(S, block_m)
    _attn_fwd_ring[(n_m * B * H,)](
        *_ring_descriptors(q, k, v, o, block_m, block_n, block_d, WS), o, 1.0 / (D ** 0.5),
        H, S, B * H, n_m, *o.stride(),
        D=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=NUM_STAGES, WS=WS,
        GROUP=HEAD_GROUP, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return o
"""
)

_PERSISTENT_BODY = (
    _KERNELS
    + _HOPPER_KERNELS
    + "\n\n"
    + _DESCRIPTOR_HELPERS
    + SM_COUNT_HELPER
    + """

def kernel(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    if not _tma_ok(q, k, v):
        _launch_pointers(q, k, v, o, *_blocks(S, D))
        return o
    block_m, block_n, block_d = _ring_blocks(S, D)
    n_m = triton.cdiv(S, block_m)
    programs = min(n_m * B * H, PROGRAMS_PER_SM * _num_sms(q.device))
    _attn_fwd_persistent[(programs,)](
        *_ring_descriptors(q, k, v, o, block_m, block_n, block_d, WS != "off"), o,
        1.0 / (D ** 0.5), H, S, B * H, n_m, *o.stride(),
        D=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=NUM_STAGES,
        WS_INNER=WS == "inner", WS_OUTER=WS == "outer", DEVICE_DESC=WS != "off",
        GROUP=HEAD_GROUP,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return o
"""
)

_WGMMA_BODY = (
    _KERNELS
    + "\n\n# the pointer kernel's warps (where the Gluon kernel cannot run): one warpgroup per 64 rows\n"
    + "NUM_WARPS = BLOCK_M // 16\n"
    + "# warp-specialised registers: what the loader gives up goes to the consumers\n"
    + "CONSUMER_REGS = 240\n"
    + "LOADER_REGS = 24\n"
    + SM_COUNT_HELPER
    + GLUON_KERNELS
    + """

def kernel(q, k, v):
    o = torch.empty_like(q)
    if _wgmma_ok(q, k, v):
        _launch_wgmma(q, k, v, o)
    else:
        _launch_pointers(q, k, v, o, *_blocks(q.shape[2], q.shape[3]))
    return o
"""
)


def _fits(p) -> bool:
    # K and V stages for BLOCK_N=128 at D=128 (bf16) exceed an SM's shared memory
    return p["BLOCK_M"] >= p["BLOCK_N"] and not (p["BLOCK_N"] == 128 and p["NUM_STAGES"] > 3)


_RING_STAGES = Param(
    "NUM_STAGES", (2, 3, 4), resource=True, doc="K/V blocks in flight in each loop's ring"
)
_WS = Param(
    "WS",
    (False, True),
    structural=True,
    doc="Triton's warp specialisation of the unmasked K/V loop (load warps apart from the "
    "math warps)",
)
_HEAD_GROUP = Param(
    "HEAD_GROUP",
    (1, 4, 16, 64),
    doc="the launch order's heads per group: inside a group every head's longest query "
    "tile first; a group's K and V share L2 (1: head after head, each from its last tile)",
)
_PERSISTENT_WS = Param(
    "WS",
    ("off", "inner", "outer"),
    structural=True,
    doc="Triton's warp specialisation: of each tile's unmasked K/V loop (inner) or of the "
    "persistent loop over tiles (outer, as TritonBench's Hopper persistent variant does)",
)
_PROGRAMS = Param("PROGRAMS_PER_SM", (1, 2), resource=True, doc="persistent programs per SM")
# fixed by the Hopper families: only their pointer fallback (tensors a descriptor cannot
# take) reads these
_POINTER_FALLBACK = {"SPLIT_DIAG": True, "EXP2": True, "REVERSE": False}


def _ring_fits(p) -> bool:
    # shared memory at D=128 (bf16) within an SM's 227 KiB: Q, the output's staging and
    # NUM_STAGES - 1 K/V blocks in flight (an estimate; flash-tma's 128x128 blocks at 3
    # stages compiled and passed on the H200, the attention search of 2026-12-03)
    kib = 2 * 128 * (2 * p["BLOCK_M"] + 2 * p["BLOCK_N"] * (p["NUM_STAGES"] - 1)) / 1024
    return kib <= 224


_WGMMA_BLOCK_M = Param(
    "BLOCK_M", (64, 128), resource=True, doc="query rows per program, one warpgroup per 64"
)
_WGMMA_STAGES = Param(
    "NUM_STAGES", (2, 3, 4), resource=True, doc="shared-memory stages of the TMA K/V ring"
)

_WGMMA_WS = Param(
    "WS",
    (False, True),
    structural=True,
    doc="a loader warp issues the TMA loads and each 64 query rows get their own consumer "
    "warpgroup (else every warp loads and computes in step)",
)

_WGMMA_EPILOGUE = Param(
    "EPILOGUE",
    ("ptr", "tma"),
    structural=True,
    doc="how the output tile leaves: masked pointer stores, or by a TMA store from shared "
    "memory (Q's buffer; a persistent CTA's own O buffer; a tile past S by pointers)",
)


_WGMMA_PERSISTENT = Param(
    "PERSISTENT",
    (False, True),
    structural=True,
    doc="(warp-specialised only) one CTA per SM walks its tiles: the next tile's Q and K "
    "load while a tile ends, its O leaves by TMA store while the next one computes",
)


_WGMMA_FILL = Param(
    "FILL",
    (False, True),
    doc="where 128-row tiles are too few to fill the SMs (short sequences), 64-row tiles "
    "with one consumer instead",
)


_WGMMA_DIAG_HALF = Param(
    "DIAG_HALF",
    (False, True),
    doc="(persistent, 128-row tiles on 128-key blocks) the first consumer takes only the "
    "first half of the diagonal key block, the half its rows can see",
)


_WGMMA_PINGPONG = Param(
    "PINGPONG",
    (False, True),
    doc="(persistent, 128-row tiles) the two consumers issue their MMAs in turns through "
    "named barriers, each one's softmax beside the other's MMAs (FlashAttention-3's ping-pong)",
)


_WGMMA_EARLY_RESCALE = Param(
    "EARLY_RESCALE",
    (False, True),
    doc="(persistent) the accumulator is rescaled to a key block's maxima just before that "
    "block's P V, beside the next Q K^T on the tensor cores (FlashAttention-3's order), "
    "instead of as soon as the P V before is done",
)


_WGMMA_KV_PAIRS = Param(
    "KV_PAIRS",
    (False, True),
    doc="(persistent) K_(j+1) and V_j share a ring stage and its barriers: a consumer waits "
    "once and frees once a key block (both after that block's P V), where K and V have "
    "rings of their own (K freed as soon as its Q K^T is done)",
)


def _wgmma_fits(p) -> bool:
    # shared memory at D=128 (16-bit) within an SM's 227 KiB: Q, NUM_STAGES K and V blocks
    # and, persistent with the TMA store, O's staging of its own
    o_rows = p["BLOCK_M"] if p["PERSISTENT"] and p["EPILOGUE"] == "tma" else 0
    kib = 2 * 128 * (p["BLOCK_M"] + o_rows + 2 * p["NUM_STAGES"] * p["BLOCK_N"]) / 1024
    two = p["PERSISTENT"] and p["BLOCK_M"] == 128  # two consumers on a persistent tile
    half_ok = two and p["BLOCK_N"] == 128
    return (
        kib <= 227
        and (p["WS"] or not p["PERSISTENT"])
        and (half_ok or not p["DIAG_HALF"])
        and (two or not p["PINGPONG"])
        and (p["PERSISTENT"] or not p["EARLY_RESCALE"])
        and (p["PERSISTENT"] or not p["KV_PAIRS"])
    )


_WGMMA = Family(
    op="attention",
    name="flash-wgmma",
    summary="Gluon flash forward for Hopper: the next key block's Q K^T and this block's "
    "P V as asynchronous warpgroup MMAs, the next softmax while P V runs, K/V through a TMA "
    "ring filled by a loader warp, unmasked blocks below the diagonal, persistent CTAs over "
    "the longest query tiles of each head group first, O out by TMA store (the pointer "
    "kernel where Gluon cannot run)",
    params=(
        _BLOCK_N,
        _WGMMA_STAGES,
        _WGMMA_WS,
        _WGMMA_BLOCK_M,
        _HEAD_GROUP,
        _WGMMA_EPILOGUE,
        _WGMMA_PERSISTENT,
        _WGMMA_FILL,
        _WGMMA_DIAG_HALF,
        _WGMMA_PINGPONG,
        _WGMMA_EARLY_RESCALE,
        _WGMMA_KV_PAIRS,
    ),
    start={
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "NUM_STAGES": 2,
        "WS": True,
        "HEAD_GROUP": 16,
        "EPILOGUE": "tma",
        "PERSISTENT": True,
        "FILL": True,
        "DIAG_HALF": True,
        "PINGPONG": False,
        "EARLY_RESCALE": False,
        "KV_PAIRS": False,
    },  # fmt: skip
    body=_WGMMA_BODY,
    valid=lambda p: p["BLOCK_N"] >= 64 and _wgmma_fits(p),
    fixed=_POINTER_FALLBACK,
)

FAMILIES: tuple[Family, ...] = (
    _WGMMA,
    Family(
        op="attention",
        name="flash-ring",
        summary="flash forward through tensor descriptors: unmasked blocks below the diagonal, "
        "masked diagonal, exp2 with the scale folded in, each K/V loop a software-pipelined "
        "ring (optionally warp-specialised), the longest query tiles of each group of heads "
        "first, output stored by descriptor",
        params=(_BLOCK_N, _RING_STAGES, _WS, _WARPS, _BLOCK_M, _HEAD_GROUP),
        # flash-tma's measured best point (64 rows on one warpgroup), with the new loops
        start={
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "NUM_WARPS": 4,
            "NUM_STAGES": 3,
            "WS": False,
            "HEAD_GROUP": 16,
        },  # fmt: skip
        body=_RING_BODY,
        valid=_ring_fits,
        links=_LINKS,
        fixed=_POINTER_FALLBACK,
    ),
    Family(
        op="attention",
        name="flash-tma",
        summary="flash forward loading Q, K and V blocks through tensor descriptors (TMA), "
        "the scale folded into exp2",
        params=(_BLOCK_N, _STAGES, _WARPS, _BLOCK_M, _REVERSE),
        # one warpgroup on 64 query rows: 0.88x SDPA on the H200 at B4 H32 S2048 D128, where
        # 128 rows on 8 warps reach 0.78x (bench/attention_probe.py, 2026-11-30); from
        # there no single-parameter step gets to it
        start={"BLOCK_M": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3, "REVERSE": False},
        body=_TMA_BODY,
        valid=_fits,
        links=_LINKS,
        # the pointer kernel (for tensors a descriptor cannot take) runs as flash-split
        fixed={"SPLIT_DIAG": True, "EXP2": True},
    ),
    Family(
        op="attention",
        name="flash-persistent",
        summary="persistent programs over (batch, head, query tile), the longest tiles of "
        "each group of heads first, each tile as flash-ring computes it (descriptors, two "
        "stages, pipelined K/V ring)",
        params=(_PROGRAMS, _BLOCK_N, _RING_STAGES, _PERSISTENT_WS, _WARPS, _BLOCK_M, _HEAD_GROUP),
        # flash-tma's measured best tile (64 rows on one warpgroup), two programs per SM as
        # two such blocks share an SM when launched one per tile
        start={
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "NUM_WARPS": 4,
            "NUM_STAGES": 3,
            "WS": "off",
            "PROGRAMS_PER_SM": 2,
            "HEAD_GROUP": 16,
        },  # fmt: skip
        body=_PERSISTENT_BODY,
        valid=_ring_fits,
        links=_LINKS,
        fixed=_POINTER_FALLBACK,
    ),
    Family(
        op="attention",
        name="flash-split",
        summary="flash forward: unmasked key blocks below the diagonal, masked diagonal blocks",
        params=(_BLOCK_N, _STAGES, _WARPS, _BLOCK_M, _EXP2),
        start={"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3, "EXP2": True},
        body=_BODY,
        valid=_fits,
        links=_LINKS,
        fixed={"SPLIT_DIAG": True, "REVERSE": False},
    ),
    Family(
        op="attention",
        name="flash-masked",
        summary="flash forward masking every key block up to the diagonal (simplest loop)",
        params=(_BLOCK_N, _STAGES, _WARPS, _BLOCK_M, _EXP2),
        start={"BLOCK_M": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3, "EXP2": True},
        body=_BODY,
        valid=_fits,
        links=_LINKS,
        fixed={"SPLIT_DIAG": False, "REVERSE": False},
    ),
    Family(
        op="attention",
        name="flash-lpt",
        summary="flash forward with the longest (last) query blocks scheduled first",
        params=(_BLOCK_N, _STAGES, _WARPS, _BLOCK_M, _EXP2),
        start={"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 2, "EXP2": True},
        body=_BODY,
        valid=_fits,
        links=_LINKS,
        fixed={"SPLIT_DIAG": True, "REVERSE": True},
    ),
)
