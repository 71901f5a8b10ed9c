"""attention's Hopper ring kernels, as template text: one tile routine whose K/V loops are
software-pipelined `tl.range` rings (optionally warp-specialised), launched per tile
(flash-ring, `RING_BODY`) or by persistent programs (flash-persistent, `PERSISTENT_BODY`).
"""

from kernelladder.ops.attention.pointer import DESCRIPTOR_HELPERS, POINTER_KERNELS
from kernelladder.ops.family import SM_COUNT_HELPER

# --- Hopper families: one tile routine, launched per tile or by persistent programs ---------
# Every K/V loop is a `tl.range` with its own software-pipeline depth (NUM_STAGES: the ring
# of K/V blocks in flight); with WS the unmasked loop takes Triton's automatic warp
# specialisation (producer warps issue the TMA loads, consumer warps the dots). The interpreter runs these loops as
# plain ranges: the pipeline depth and WS change nothing on the CPU and are exercised only
# on the GPU; everything else (descriptor loads, the two stages, the tile order, the
# full-tile descriptor store and the pointer store of a tail tile) runs in the interpreter.
RING_KERNELS = """

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

# The entry's start: the pointer kernel where a descriptor cannot take the tensors.
_RING_ENTRY = """

def kernel(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    if not _tma_ok(q, k, v):
        _launch_pointers(q, k, v, o, *_blocks(S, D))
        return o
    block_m, block_n, block_d = _ring_blocks(S, D)
    n_m = triton.cdiv(S, block_m)"""

RING_BODY = (
    POINTER_KERNELS
    + RING_KERNELS
    + "\n\n"
    + DESCRIPTOR_HELPERS
    + _RING_ENTRY
    + """
    _attn_fwd_ring[(n_m * B * H,)](
        *_ring_descriptors(q, k, v, o, block_m, block_n, block_d, WS), o, 1.0 / (D ** 0.5),
        H, S, B * H, n_m, *o.stride(),
        D=D, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=NUM_STAGES, WS=WS,
        GROUP=HEAD_GROUP, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return o
"""
)

PERSISTENT_BODY = (
    POINTER_KERNELS
    + RING_KERNELS
    + "\n\n"
    + DESCRIPTOR_HELPERS
    + SM_COUNT_HELPER
    + _RING_ENTRY
    + """
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
