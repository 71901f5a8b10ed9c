"""attention's flash-wgmma family: a Gluon kernel for Hopper's warpgroup MMA.

Triton's `tl.dot` leaves the order of a flash loop's matrix products and its softmax to
the compiler, which on Hopper waits for each product before the softmax that follows.
Gluon, shipped inside Triton (`triton.experimental.gluon`), writes the warpgroup MMAs,
their waits, the TMA loads and their barriers explicitly. This kernel overlaps as FlashAttention-3 does within a
warpgroup: the next key block's Q K^T and this block's P V are issued asynchronously, the
next block's softmax runs on the CUDA cores while P V is still on the tensor cores, and
K/V blocks come through a ring of NUM_STAGES shared-memory stages filled by TMA. The
start is warp-specialised (a loader warp, a consumer warpgroup per 64 query rows) and
persistent (one CTA per SM over a table of tiles made once per shape), and its output
leaves by TMA store while the next tile computes; the first consumer takes only the half of
the diagonal key block its rows see: 1.13x cuDNN at B4 H32 S2048 D128 on an H100 (RESULTS.md,
2026-12-06 night). The persistent kernels are in wgmma_persistent.py.

`GLUON_KERNELS` is source text pasted into a candidate after the family's parameter block
(families.py builds the family). Gluon runs only on the GPU: its kernels have no CPU
interpreter, and warpgroup MMA is Hopper's alone (compute capability 9.0). A candidate
therefore runs the pointer flash kernel (pointer.py's `POINTER_KERNELS`) wherever the
Gluon path cannot: the CPU, another GPU, a Triton without Gluon, tensors a descriptor
cannot take, or a head dim that is not a power of two from 16 to 128. The CPU tests compile the Gluon
kernel for sm_90a (Triton compiles for a target without the device).
"""

from __future__ import annotations

from kernelladder.ops.attention.wgmma_persistent import GLUON_PERSISTENT

_GLUON_TILES = """
import heapq

try:  # Gluon (Triton's explicit layer) with Hopper's warpgroup MMA, TMA and mbarriers
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    # a TMA load into shared memory: async_load since Triton 3.7, the older name before
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    # and a TMA store from it: async_store since Triton 3.7 (the older name then raises)
    _tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
except ImportError:  # an older Triton: the kernels below are defined but never launched
    gluon, gl = triton, tl


@gluon.jit
def _gl_tile_of(t, BH, N_M, GROUP):
    # tile t of the launch order: heads in groups of GROUP (their K and V share L2), and
    # inside a group every head's last (longest) query tile first, then the one before
    per_group = GROUP * N_M
    g = t // per_group
    r = t % per_group
    heads = gl.minimum(BH - g * GROUP, GROUP)
    return g * GROUP + r % heads, N_M - 1 - r // heads


@gluon.jit
def _gl_softmax(s, m_i, l_i, jb, start_m, S, qk_scale, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, MASKED: gl.constexpr, s_layout: gl.constexpr):
    # the online softmax of key block jb: new row maxima, P, the row sums, and alpha (the
    # factor that carries the accumulator over to the new maxima); exp2 with log2(e) /
    # sqrt(D) folded into qk_scale
    if MASKED:
        rows = start_m + gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout))
        cols = jb * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        keep = (cols[None, :] <= rows[:, None]) & (cols[None, :] < S)
        qk = gl.where(keep, s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(qk, axis=1))
        p = gl.exp2(qk - m_new[:, None])
    else:
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _gl_block_softmax(s, m_i, l_i, jb, n_full, start_m, S, qk_scale, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    # key blocks before n_full lie wholly below the tile's first row: no mask there
    if jb < n_full:
        p, m_i, l_i, alpha = _gl_softmax(s, m_i, l_i, jb, start_m, S, qk_scale, BLOCK_M,
                                         BLOCK_N, False, s_layout)
    else:
        p, m_i, l_i, alpha = _gl_softmax(s, m_i, l_i, jb, start_m, S, qk_scale, BLOCK_M,
                                         BLOCK_N, True, s_layout)
    return p, m_i, l_i, alpha


@gluon.jit
def _gl_load(desc, smem, bar, row, stage, ok):
    # one key block's K (or V) into a ring stage, with the stage's barrier; K and V have
    # rings of their own, so a K stage is refilled as soon as its Q K^T is done, before the
    # P V of the same block; nothing is issued when ok is false (past the last key block)
    mbarrier.expect(bar.index(stage), desc.block_type.nbytes, pred=ok)
    _tma_load(desc, [row, 0], bar.index(stage), smem.index(stage), pred=ok)


@gluon.jit
def _gl_ptr_store(out, O, bh, H, S, first, sob, soh, sos, sod, o_layout: gl.constexpr):
    # the output tile's rows first.. through pointers; rows past S (a tail tile) are not stored
    rows = first + gl.arange(0, out.shape[0], gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, out.shape[1], gl.SliceLayout(0, o_layout))
    o_base = O + (bh // H).to(gl.int64) * sob + (bh % H).to(gl.int64) * soh
    gl.store(o_base + rows[:, None] * sos + cols[None, :] * sod, out,
             mask=(rows[:, None] < S) & (cols[None, :] < out.shape[1]))


@gluon.jit
def _gl_store_out(out, q_smem, o_desc, O, bh, H, S, first, sob, soh, sos, sod,
                  o_layout: gl.constexpr):
    # EPILOGUE "tma" (o_desc given): the tile goes through Q's shared buffer (free: every
    # MMA has been waited for) by one TMA store. A TMA store clips only at the flat
    # [B * H * S, D] view's end, so a tile that runs past S (the head's last, when BLOCK_M
    # does not divide S) stores through pointers: a branch of public calls, where a 3-D
    # [B * H, S, D] descriptor would need Q's 2-D buffer reinterpreted as [1, rows, D].
    if o_desc is None:
        _gl_ptr_store(out, O, bh, H, S, first, sob, soh, sos, sod, o_layout)
    elif first + out.shape[0] <= S:
        q_smem.store(out)
        # each thread's writes seen by the async proxy; Gluon then syncs the warps (a named
        # barrier of 128 threads in a consumer) before one thread issues the TMA store
        fence_async_shared()
        _tma_store(o_desc, [bh * S + first, 0], q_smem)
        tma.store_wait(0)
    else:
        _gl_ptr_store(out, O, bh, H, S, first, sob, soh, sos, sod, o_layout)


@gluon.jit
def _gl_attn_fwd(q_desc, k_desc, v_desc, o_desc, O, sm_scale, H, S, BH, N_M, sob, soh, sos,
                 sod, D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 STAGES: gl.constexpr, GROUP: gl.constexpr, num_warps: gl.constexpr):
    # q, k, v seen as [B * H * S, D] (a (batch, head) is S rows from row0); one program per
    # query tile of BLOCK_M rows, one warpgroup per 64 of them
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    bh, pid_m = _gl_tile_of(gl.program_id(0), BH, N_M, GROUP)
    row0 = bh * S
    start_m = pid_m * BLOCK_M
    qk_scale = sm_scale * 1.4426950408889634

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(v_bar.index(i), count=1)

    # causal: key blocks up to the tile's last row; those wholly below its first row
    # (n_full of them) need no mask. Rows of K and V past this head's S (the next head's,
    # or zeros past the tensor's end) only reach masked blocks, where they are -inf.
    n_blocks = gl.cdiv(gl.minimum(start_m + BLOCK_M, S), BLOCK_N)
    n_full = start_m // BLOCK_N
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + start_m, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _gl_load(k_desc, k_smem, k_bar, row0 + i * BLOCK_N, i, i < n_blocks)
        _gl_load(v_desc, v_smem, v_bar, row0 + i * BLOCK_N, i, i < n_blocks)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_s)
    acc = gl.zeros([BLOCK_M, D], gl.float32, o_layout)
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bar.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s, use_acc=False,
                      is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    _gl_load(k_desc, k_smem, k_bar, row0 + STAGES * BLOCK_N, 0, STAGES < n_blocks)
    p, m_i, l_i, alpha = _gl_block_softmax(s, m_i, l_i, 0, n_full, start_m, S,
                                           qk_scale, BLOCK_M, BLOCK_N, s_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(0, n_blocks - 1):
        # the next block's Q K^T, then this block's P V, both in flight; the next block's
        # softmax runs while P V is still on the tensor cores
        jn = j + 1
        sn = jn % STAGES
        mbarrier.wait(k_bar.index(sn), (jn // STAGES) & 1)
        s = warpgroup_mma(q_smem, k_smem.index(sn).permute((1, 0)), s, use_acc=False,
                          is_async=True)
        sc = j % STAGES
        mbarrier.wait(v_bar.index(sc), (j // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_smem.index(sc), acc, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s,))
        nk = jn + STAGES  # K_jn's stage is free: the key block STAGES ahead goes into it
        _gl_load(k_desc, k_smem, k_bar, row0 + nk * BLOCK_N, sn, nk < n_blocks)
        p, m_i, l_i, alpha = _gl_block_softmax(s, m_i, l_i, jn, n_full, start_m, S,
                                               qk_scale, BLOCK_M, BLOCK_N, s_layout)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        nv = j + STAGES  # V_j's stage is free
        _gl_load(v_desc, v_smem, v_bar, row0 + nv * BLOCK_N, sc, nv < n_blocks)

    jl = n_blocks - 1
    sl = jl % STAGES
    mbarrier.wait(v_bar.index(sl), (jl // STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(sl), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bar.index(i))
        mbarrier.invalidate(v_bar.index(i))

    # deferred normalisation: one reciprocal per row, after the last key block
    out = (acc * (1.0 / gl.convert_layout(l_i, row_o))[:, None]).to(dtype)
    _gl_store_out(out, q_smem, o_desc, O, bh, H, S, start_m, sob, soh, sos, sod, o_layout)


# --- warp-specialised: a loader warp and one or two consumer warpgroups -------------------
# The loader issues every TMA load of a CTA's K and V rings and waits only on their "empty"
# barriers; each consumer warpgroup takes 64 query rows, waits only on "ready" barriers
# and frees a K stage once its Q K^T is done, a V stage once its P V is (one arrival
# each). The consumers share the K and V blocks and run apart, so one's softmax overlaps
# the other's MMAs (the warp scheduler interleaves them; FlashAttention-3's ping-pong
# forces the order). Every partition takes the same arguments (Gluon's rule for worker
# partitions), none of them constexpr but o_desc's None (Triton 3.6 hands a partition its
# constexpr numbers as tensors; None reaches it as None): the tile sizes come from the
# descriptors' blocks and the buffers' shapes.


@gluon.jit
def _gl_ws_loader(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar, k_ready,
                  v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh, sos, sod):
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    CONSUMERS: gl.constexpr = q_smem.type.shape[0]
    row0 = bh * S
    mbarrier.expect(q_bar, CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(CONSUMERS):
        _tma_load(q_desc, [row0 + start_m + c * 64, 0], q_bar, q_smem.index(c))
    # K_j, then V_(j-1): the order the consumers use them (Q K^T of a block runs before
    # P V of the one before); empty holds K's stages, then V's. A stage's barrier starts as
    # if its phase 1 had completed: the first pass waits for nothing.
    for j in range(n_blocks + 1):
        if j < n_blocks:
            st = j % STAGES
            mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)
            _gl_load(k_desc, k_smem, k_ready, row0 + j * BLOCK_N, st, True)
        if j > 0:
            jv = j - 1
            st = jv % STAGES
            mbarrier.wait(empty.index(STAGES + st), ((jv // STAGES) & 1) ^ 1)
            _gl_load(v_desc, v_smem, v_ready, row0 + jv * BLOCK_N, st, True)


@gluon.jit
def _gl_named_bar(PTX: gl.constexpr):
    # one named-barrier instruction, executed by every thread of the warpgroup: inline PTX
    # (Gluon has no call for named barriers), not pure, so it stays where it is written
    gl.inline_asm_elementwise(PTX, "=r", [], dtype=gl.int32, is_pure=False, pack=1)
"""

# PINGPONG's two steps, the same but for the instruction and the order of the barriers:
# consumer TURN (0 or 1; -1: off) waits on barrier 8 + TURN, and hands over by arriving on
# the other's
_TURN_STEP = """

@gluon.jit
def _gl_turn_{step}(TURN: gl.constexpr):
{why}
    if TURN == 0:
        _gl_named_bar("bar.{instruction} {first}, 256; mov.u32 $0, 0;")
    elif TURN == 1:
        _gl_named_bar("bar.{instruction} {second}, 256; mov.u32 $0, 0;")
"""
_TURN_WAIT = _TURN_STEP.format(
    step="wait",
    why="""\
    # PINGPONG (TURN 0 or 1, the consumer's number; -1: off): wait for this consumer's turn
    # to issue its MMAs. Named barrier 8 + TURN completes when this warpgroup's 128 threads
    # sync on it and the other consumer's 128 have arrived (handed the turn over): the two
    # consumers' MMAs reach the tensor cores in turns, each one's softmax beside the other's
    # MMAs (FlashAttention-3's ping-pong). Barriers 0-2 are Gluon's own.""",
    instruction="sync",
    first=8,
    second=9,
)
_TURN_PASS = _TURN_STEP.format(
    step="pass",
    why="    # PINGPONG: hand the turn to the other consumer (arrive on its barrier without waiting)",
    instruction="arrive",
    first=9,
    second=8,
)

_WS_BLOCKS = """

@gluon.jit
def _gl_wait_v_before(v_ready, kv, sk, STAGES: gl.constexpr, PAIRS: gl.constexpr):
    # the V block whose P V runs beside the Q K^T on K stage sk: ring position kv of V's own
    # ring, waited for; with PAIRS it shares K's stage and has landed with it. Its stage, and
    # the index in `empty` that frees it once its P V is done (with PAIRS, K's stage too)
    if PAIRS:
        sv = sk
        done = sk
    else:
        sv = kv % STAGES
        mbarrier.wait(v_ready.index(sv), (kv // STAGES) & 1)
        done = STAGES + sv
    return sv, done


@gluon.jit
def _gl_wg_first_block(q, s, m_i, l_i, k_smem, k_ready, empty, c, n_full, first, S, qk_scale,
                       s_layout: gl.constexpr, o_layout: gl.constexpr, TURN: gl.constexpr):
    # a consumer warpgroup's first key block of a tile (ring position c): its Q K^T waited
    # for, the K stage freed, its softmax; P comes back as the next P V's register operand
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    st = c % STAGES
    mbarrier.wait(k_ready.index(st), (c // STAGES) & 1)
    _gl_turn_wait(TURN)
    s = warpgroup_mma(q, k_smem.index(st).permute((1, 0)), s, use_acc=False, is_async=True)
    _gl_turn_pass(TURN)
    s = warpgroup_mma_wait(0, deps=(s,))
    mbarrier.arrive(empty.index(st), count=1)  # done with K_0
    p, m_i, l_i, alpha = _gl_block_softmax(s, m_i, l_i, 0, n_full, first, S, qk_scale, 64,
                                           BLOCK_N, s_layout)
    return s, gl.convert_layout(p.to(q.dtype), p_layout), m_i, l_i


@gluon.jit
def _gl_wg_key_blocks(q, s, p_op, acc, m_i, l_i, k_smem, v_smem, k_ready, v_ready, empty, c,
                      n_loop, n_full, first, S, qk_scale, s_layout: gl.constexpr,
                      o_layout: gl.constexpr, TURN: gl.constexpr, EARLY: gl.constexpr,
                      PAIRS: gl.constexpr):
    # the tile's key blocks 1 .. n_loop (ring positions c + 1 ..): the next block's Q K^T,
    # then this block's P V, both in flight; the next block's softmax runs while P V is
    # still on the tensor cores. A K stage is freed once its Q K^T is done, a V stage once
    # its P V is (one arrival per consumer each). The accumulator is rescaled to a block's
    # maxima once the P V before is waited for, or with EARLY (EARLY_RESCALE) just before
    # the block's own P V, beside the Q K^T issued ahead of it; then the last block's factor
    # comes back unapplied (alpha). With PAIRS (KV_PAIRS) K_(j+1) and V_j share ring stage
    # c + j + 1: one barrier says both have landed, one arrival frees both once P V is done.
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    alpha = gl.full([s.shape[0]], 1.0, gl.float32, gl.SliceLayout(1, s_layout))
    for j in range(0, n_loop):
        kn = c + j + 1
        sn = kn % STAGES
        mbarrier.wait(k_ready.index(sn), (kn // STAGES) & 1)
        _gl_turn_wait(TURN)
        s = warpgroup_mma(q, k_smem.index(sn).permute((1, 0)), s, use_acc=False,
                          is_async=True)
        if EARLY:
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        sc, v_done = _gl_wait_v_before(v_ready, c + j, sn, STAGES, PAIRS)
        acc = warpgroup_mma(p_op, v_smem.index(sc), acc, is_async=True)
        _gl_turn_pass(TURN)
        s = warpgroup_mma_wait(1, deps=(s,))
        if not PAIRS:
            mbarrier.arrive(empty.index(sn), count=1)  # done with K_(j+1)
        p, m_i, l_i, alpha = _gl_block_softmax(s, m_i, l_i, j + 1, n_full, first, S,
                                               qk_scale, 64, BLOCK_N, s_layout)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(empty.index(v_done), count=1)  # done with V_j (with PAIRS, K_(j+1))
        if not EARLY:
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p_op = gl.convert_layout(p.to(q.dtype), p_layout)
    if EARLY:
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    return s, p_op, acc, m_i, l_i


@gluon.jit
def _gl_ws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar,
                   k_ready, v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh,
                   sos, sod, WG: gl.constexpr):
    # one consumer warpgroup: query rows start_m + 64 * WG .. + 63 of the CTA's tile
    dtype: gl.constexpr = q_desc.dtype
    D: gl.constexpr = k_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    first = start_m + 64 * WG
    n_full = first // BLOCK_N
    q = q_smem.index(WG)

    m_i = gl.full([64], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([64], gl.float32, row_s)
    acc = gl.zeros([64, D], gl.float32, o_layout)
    s = gl.zeros([64, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    s, p_op, m_i, l_i = _gl_wg_first_block(q, s, m_i, l_i, k_smem, k_ready, empty, 0, n_full,
                                           first, S, qk_scale, s_layout, o_layout, -1)
    s, p_op, acc, m_i, l_i = _gl_wg_key_blocks(q, s, p_op, acc, m_i, l_i, k_smem, v_smem,
                                               k_ready, v_ready, empty, 0, n_blocks - 1,
                                               n_full, first, S, qk_scale, s_layout, o_layout,
                                               -1, False, False)
    jl = n_blocks - 1
    sl = jl % STAGES
    mbarrier.wait(v_ready.index(sl), (jl // STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(sl), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    out = (acc * (1.0 / gl.convert_layout(l_i, row_o))[:, None]).to(dtype)
    _gl_store_out(out, q, o_desc, O, bh, H, S, first, sob, soh, sos, sod, o_layout)
"""

# Gluon runs one function per warp-specialised partition: an entry for each consumer
# warpgroup, the same but for its number (WG)
_WS_CONSUMER = """

@gluon.jit
def _gl_ws_consumer{wg}(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar,
                     k_ready, v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh,
                     sos, sod):
    _gl_ws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar, k_ready,
                   v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh, sos, sod,
                   {wg})
"""

_WS_LAUNCH = """

@gluon.jit
def _gl_attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, O, sm_scale, H, S, BH, N_M, sob, soh,
                    sos, sod, D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    CONSUMERS: gl.constexpr, GROUP: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # a CTA takes 64 * CONSUMERS query rows; q_desc's blocks are 64 rows
    dtype: gl.constexpr = q_desc.dtype
    bh, pid_m = _gl_tile_of(gl.program_id(0), BH, N_M, GROUP)
    start_m = pid_m * (64 * CONSUMERS)
    q_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, 64, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
        mbarrier.init(empty.index(STAGES + i), count=CONSUMERS)
    n_blocks = gl.cdiv(gl.minimum(start_m + 64 * CONSUMERS, S), BLOCK_N)
    args = (q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
            empty, bh, H, S, start_m, n_blocks, sm_scale * 1.4426950408889634, sob, soh, sos,
            sod)
    if CONSUMERS == 2:
        gl.warp_specialize([(_gl_ws_consumer0, args), (_gl_ws_consumer1, args),
                            (_gl_ws_loader, args)], [4, 1], [CONSUMER_REGS, 24])
    else:
        gl.warp_specialize([(_gl_ws_consumer0, args), (_gl_ws_loader, args)], [1], [24])
"""

_GLUON_HOST = '''


_HOPPER_CAPABILITY = {}


def _wgmma_ok(q, k, v):
    """Whether the Gluon kernel takes these tensors: Gluon present, a Hopper GPU (warpgroup
    MMA is compute capability 9.0's alone), fp16 or bf16 q, k and v of one shape, dense
    and 16-byte aligned (TMA), a head dim that is a power of two from 16 to 128."""
    if gluon is triton or not q.is_cuda:
        return False
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    if index not in _HOPPER_CAPABILITY:
        _HOPPER_CAPABILITY[index] = torch.cuda.get_device_capability(index) == (9, 0)
    D = q.shape[3]
    return (
        _HOPPER_CAPABILITY[index]
        and q.dtype in (torch.float16, torch.bfloat16)
        and 16 <= D <= 128
        and D & (D - 1) == 0
        and all(
            t.dtype == q.dtype and t.shape == q.shape and t.is_contiguous()
            and t.data_ptr() % 16 == 0
            for t in (q, k, v)
        )
    )


def _ws_maxnreg(block_m):
    """A warp-specialised CTA's registers per thread at launch: every warp starts with them
    (two consumers and the loader are three warpgroups), then the loader gives its own up
    to the consumers."""
    return 168 if block_m == 128 else 128


def _launch_wgmma(q, k, v, o):
    B, H, S, D = q.shape
    element = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    block_m = BLOCK_M
    if FILL and block_m == 128 and B * H * triton.cdiv(S, 128) < _num_sms(q.device):
        block_m = 64  # too few tiles of 128 rows to fill the SMs (short sequences): halve
    q_rows = 64 if WS else block_m  # a warp-specialised CTA loads Q per consumer

    def desc(t, rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, D], element)
        return GluonDescriptor.from_tensor(t.view(B * H * S, D), [rows, D], layout)

    # EPILOGUE "tma": O (contiguous: kernel() makes it) leaves by TMA in Q's blocks; "ptr":
    # the kernels store it through pointers
    descs = (desc(q, q_rows), desc(k, BLOCK_N), desc(v, BLOCK_N),
             desc(o, q_rows) if EPILOGUE == "tma" else None)
    n_m = triton.cdiv(S, block_m)
    maxnreg = _ws_maxnreg(block_m)
    if WS and PERSISTENT:
        sched = _schedule(B * H, n_m, block_m, S, q.device)
        _gl_attn_fwd_pws[(sched.shape[0],)](
            *descs, o, sched, sched.shape[1], 1.0 / (D ** 0.5), H, S, B * H, n_m, HEAD_GROUP,
            *o.stride(),
            D=D, BLOCK_N=BLOCK_N, STAGES=NUM_STAGES, CONSUMERS=block_m // 64,
            CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS, DIAG_HALF=DIAG_HALF,
            PINGPONG=PINGPONG, EARLY_RESCALE=EARLY_RESCALE, KV_PAIRS=KV_PAIRS, num_warps=4,
            maxnreg=maxnreg,
        )
        return
    if WS:
        _gl_attn_fwd_ws[(n_m * B * H,)](
            *descs, o, 1.0 / (D ** 0.5), H, S, B * H, n_m, *o.stride(),
            D=D, BLOCK_N=BLOCK_N, STAGES=NUM_STAGES, CONSUMERS=block_m // 64,
            GROUP=HEAD_GROUP, CONSUMER_REGS=CONSUMER_REGS, num_warps=4,
            maxnreg=maxnreg,
        )
        return
    _gl_attn_fwd[(n_m * B * H,)](
        *descs, o, 1.0 / (D ** 0.5), H, S, B * H, n_m, *o.stride(),
        D=D, BLOCK_M=block_m, BLOCK_N=BLOCK_N, STAGES=NUM_STAGES, GROUP=HEAD_GROUP,
        num_warps=block_m // 16,
    )
'''

# the source pasted into a candidate: the per-tile kernels (PINGPONG's two steps, and the
# warp-specialised kernel's consumer entries, each made from one text), the persistent
# ones, the launch
GLUON_KERNELS = (
    _GLUON_TILES
    + _TURN_WAIT
    + _TURN_PASS
    + _WS_BLOCKS
    + "".join(_WS_CONSUMER.format(wg=wg) for wg in (0, 1))
    + _WS_LAUNCH
    + GLUON_PERSISTENT
    + _GLUON_HOST
)
