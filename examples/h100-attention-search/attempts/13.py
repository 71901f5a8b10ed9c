# kernelladder-search: {"family":"flash-wgmma","op":"attention","params":{"BLOCK_M":128,"BLOCK_N":128,"DIAG_HALF":true,"EARLY_RESCALE":false,"EPILOGUE":"ptr","FILL":true,"HEAD_GROUP":16,"KV_PAIRS":false,"NUM_STAGES":2,"PERSISTENT":true,"PINGPONG":false,"WS":true}}
"""attention, search family "flash-wgmma": Gluon flash forward for Hopper: the next key block's Q K^T and this block's P V as asynchronous warpgroup MMAs, the next softmax while P V runs, K/V through a TMA ring filled by a loader warp, unmasked blocks below the diagonal, persistent CTAs over the longest query tiles of each head group first, O out by TMA store (the pointer kernel where Gluon cannot run)

Written by kernelladder's built-in search from a parameterized template.
"""

import torch
import triton
import triton.language as tl

# search parameters
BLOCK_N = 128
NUM_STAGES = 2
WS = True
BLOCK_M = 128
HEAD_GROUP = 16
EPILOGUE = 'ptr'
PERSISTENT = True
FILL = True
DIAG_HALF = True
PINGPONG = False
EARLY_RESCALE = False
KV_PAIRS = False
SPLIT_DIAG = True  # fixed by the family
EXP2 = True  # fixed by the family
REVERSE = False  # fixed by the family

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


# the pointer kernel's warps (where the Gluon kernel cannot run): one warpgroup per 64 rows
NUM_WARPS = BLOCK_M // 16
# warp-specialised registers: what the loader gives up goes to the consumers
CONSUMER_REGS = 240
LOADER_REGS = 24

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


@gluon.jit
def _gl_turn_wait(TURN: gl.constexpr):
    # PINGPONG (TURN 0 or 1, the consumer's number; -1: off): wait for this consumer's turn
    # to issue its MMAs. Named barrier 8 + TURN completes when this warpgroup's 128 threads
    # sync on it and the other consumer's 128 have arrived (handed the turn over): the two
    # consumers' MMAs reach the tensor cores in turns, each one's softmax beside the other's
    # MMAs (FlashAttention-3's ping-pong). Barriers 0-2 are Gluon's own.
    if TURN == 0:
        _gl_named_bar("bar.sync 8, 256; mov.u32 $0, 0;")
    elif TURN == 1:
        _gl_named_bar("bar.sync 9, 256; mov.u32 $0, 0;")


@gluon.jit
def _gl_turn_pass(TURN: gl.constexpr):
    # PINGPONG: hand the turn to the other consumer (arrive on its barrier without waiting)
    if TURN == 0:
        _gl_named_bar("bar.arrive 9, 256; mov.u32 $0, 0;")
    elif TURN == 1:
        _gl_named_bar("bar.arrive 8, 256; mov.u32 $0, 0;")


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


@gluon.jit
def _gl_ws_consumer0(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar,
                     k_ready, v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh,
                     sos, sod):
    _gl_ws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar, k_ready,
                   v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh, sos, sod,
                   0)


@gluon.jit
def _gl_ws_consumer1(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar,
                     k_ready, v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh,
                     sos, sod):
    _gl_ws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, q_bar, k_ready,
                   v_ready, empty, bh, H, S, start_m, n_blocks, qk_scale, sob, soh, sos, sod,
                   1)


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



# --- persistent and warp-specialised: one CTA per SM walks the launch order's tiles --------
# The loader's K/V ring and the consumers' reading of it run on across tiles (a running count
# of key blocks gives each its stage and phase), so the next tile's Q and first K blocks load
# while the consumers finish a tile; each consumer has Q and O buffers of its own: Q is
# freed (q_empty) once its last Q K^T is done, and O leaves by TMA store while the next tile
# computes (the store is waited for only before the buffer is written again). Every
# partition reads its program's tiles from the same row of `sched` (_schedule: the launch
# order's tiles dealt to the program free first), -1 after the last.


@gluon.jit
def _gl_pws_loader(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                   q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                   early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod):
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    CONSUMERS: gl.constexpr = q_smem.type.shape[0]
    c = 0  # key blocks (with pairs: ring items) loaded before this tile: the ring's position
    i = 0  # tiles before this one: the phase of Q's barriers
    row = sched + gl.program_id(0) * width
    t = gl.load(row)
    while t >= 0:
        # the tile's head, first row and key blocks, as its first consumer reckons them
        bh, start_m, n_blocks, _ = _gl_pws_tile(t, BH, N_M, group, S, 0, CONSUMERS, BLOCK_N)
        row0 = bh * S
        # K_0 first (its stage frees before Q's buffers do), then each consumer's Q, then
        # K_j and V_(j-1) in the order the consumers use them
        for j in range(n_blocks + 1):
            if pairs is not None:
                _gl_pair_load(k_desc, v_desc, k_smem, v_smem, k_ready, empty, row0, c + j, j,
                              n_blocks)
            elif j < n_blocks:
                kb = c + j
                st = kb % STAGES
                mbarrier.wait(empty.index(st), ((kb // STAGES) & 1) ^ 1)
                _gl_load(k_desc, k_smem, k_ready, row0 + j * BLOCK_N, st, True)
            if j == 0:
                for w in gl.static_range(CONSUMERS):
                    mbarrier.wait(q_empty.index(w), (i & 1) ^ 1)
                    mbarrier.expect(q_ready.index(w), q_desc.block_type.nbytes)
                    _tma_load(q_desc, [row0 + start_m + w * 64, 0], q_ready.index(w),
                              q_smem.index(w))
            elif pairs is None:
                kv = c + j - 1
                st = kv % STAGES
                mbarrier.wait(empty.index(STAGES + st), ((kv // STAGES) & 1) ^ 1)
                _gl_load(v_desc, v_smem, v_ready, row0 + (j - 1) * BLOCK_N, st, True)
        c += n_blocks
        if pairs is not None:
            c += 1  # V_(n-1)'s item
        i += 1
        t = gl.load(row + i)


@gluon.jit
def _gl_pair_load(k_desc, v_desc, k_smem, v_smem, ready, empty, row0, item, j, n_blocks):
    # KV_PAIRS: ring item j of a tile (running count `item`) holds K_j and V_(j-1) in one
    # stage, both landing on one barrier: item 0 is K_0 alone, item n_blocks V_(n-1) alone
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    st = item % STAGES
    mbarrier.wait(empty.index(st), ((item // STAGES) & 1) ^ 1)
    if j == 0:
        mbarrier.expect(ready.index(st), k_desc.block_type.nbytes)
    elif j < n_blocks:
        mbarrier.expect(ready.index(st), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    else:
        mbarrier.expect(ready.index(st), v_desc.block_type.nbytes)
    if j < n_blocks:
        _tma_load(k_desc, [row0 + j * BLOCK_N, 0], ready.index(st), k_smem.index(st))
    if j > 0:
        _tma_load(v_desc, [row0 + (j - 1) * BLOCK_N, 0], ready.index(st), v_smem.index(st))


@gluon.jit
def _gl_wait_last_v(k_ready, v_ready, c, n_blocks, STAGES: gl.constexpr, PAIRS: gl.constexpr):
    # wait for the tile's last V (ring position c is its K_0's): its stage, and the index of
    # the barrier that frees it (with PAIRS the tile's last ring item, V_(n-1) alone)
    if PAIRS:
        kl = c + n_blocks
        sl = kl % STAGES
        mbarrier.wait(k_ready.index(sl), (kl // STAGES) & 1)
        done = sl
    else:
        kl = c + n_blocks - 1
        sl = kl % STAGES
        mbarrier.wait(v_ready.index(sl), (kl // STAGES) & 1)
        done = STAGES + sl
    return sl, done


@gluon.jit
def _gl_pws_last_pv(p_op, acc, l_i, v_smem, k_ready, v_ready, empty, q_empty, c, n_blocks,
                    PAIRS: gl.constexpr):
    # the tile's last key block taken whole: its P V (every Q K^T of the tile is done)
    STAGES: gl.constexpr = v_smem.type.shape[0]
    mbarrier.arrive(q_empty, count=1)
    sl, done = _gl_wait_last_v(k_ready, v_ready, c, n_blocks, STAGES, PAIRS)
    acc = warpgroup_mma(p_op, v_smem.index(sl), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index(done), count=1)  # done with the last V
    return acc, l_i


@gluon.jit
def _gl_pws_half_qk(q, p_op, acc, m_i, l_i, k_smem, v_smem, k_ready, v_ready, empty, q_empty,
                    c, n_blocks, first, S, qk_scale, TURN: gl.constexpr, PAIRS: gl.constexpr):
    # DIAG_HALF, the first of two consumers (rows first .. first + 63 of a 128-row tile on
    # 128-key blocks): the last key block starts at `first`, so only its first 64 keys
    # reach these rows. Their Q K^T (a 64-wide warpgroup MMA on the stage's first half)
    # runs beside the P V of the block before; P of those 64 keys comes back for their P V.
    # With PAIRS both blocks are ring item c + n_blocks - 1.
    dtype: gl.constexpr = p_op.dtype
    D: gl.constexpr = v_smem.type.shape[2]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16])
    h_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_h: gl.constexpr = gl.SliceLayout(1, h_layout)
    kl = c + n_blocks - 1
    sl = kl % STAGES
    mbarrier.wait(k_ready.index(sl), (kl // STAGES) & 1)
    sh = gl.zeros([64, 64], gl.float32, h_layout)
    _gl_turn_wait(TURN)
    sh = warpgroup_mma(q, k_smem.index(sl).slice(0, 64).permute((1, 0)), sh, use_acc=False,
                       is_async=True)
    sc, v_done = _gl_wait_v_before(v_ready, kl - 1, sl, STAGES, PAIRS)
    acc = warpgroup_mma(p_op, v_smem.index(sc), acc, is_async=True)
    _gl_turn_pass(TURN)
    sh = warpgroup_mma_wait(1, deps=(sh,))
    if not PAIRS:
        mbarrier.arrive(empty.index(sl), count=1)  # done with the last K
    mbarrier.arrive(q_empty, count=1)  # every Q K^T of the tile is done
    p, m_h, l_h, alpha = _gl_softmax(sh, gl.convert_layout(m_i, row_h),
                                     gl.convert_layout(l_i, row_h), 2 * (n_blocks - 1), first,
                                     S, qk_scale, 64, 64, True, h_layout)
    acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
    mbarrier.arrive(empty.index(v_done), count=1)  # done with the V before (PAIRS: last K)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    ph = gl.convert_layout(p.to(dtype), p_layout)
    return acc, ph, gl.convert_layout(l_h, gl.SliceLayout(1, s_layout))


@gluon.jit
def _gl_pws_last(q, p_op, acc, m_i, l_i, k_smem, v_smem, k_ready, v_ready, empty, q_empty, c,
                 n_blocks, first, S, qk_scale, HALF: gl.constexpr, TURN: gl.constexpr,
                 PAIRS: gl.constexpr):
    # a tile's end when no tile follows it: its last P V alone (with HALF, on the diagonal
    # block's first 64 keys, after their Q K^T); the tile's accumulator and row sums
    if HALF:
        if n_blocks > 1:
            acc, ph, l_i = _gl_pws_half_qk(q, p_op, acc, m_i, l_i, k_smem, v_smem, k_ready,
                                           v_ready, empty, q_empty, c, n_blocks, first, S,
                                           qk_scale, TURN, PAIRS)
            STAGES: gl.constexpr = v_smem.type.shape[0]
            sl, done = _gl_wait_last_v(k_ready, v_ready, c, n_blocks, STAGES, PAIRS)
            acc = warpgroup_mma(ph, v_smem.index(sl).slice(0, 64), acc, is_async=True)
            acc, ph = warpgroup_mma_wait(0, deps=(acc, ph))
            mbarrier.arrive(empty.index(done), count=1)  # done with the last V
        else:  # the head's first tile: one block, wholly on the diagonal
            acc, l_i = _gl_pws_last_pv(p_op, acc, l_i, v_smem, k_ready, v_ready, empty,
                                       q_empty, c, n_blocks, PAIRS)
    else:
        acc, l_i = _gl_pws_last_pv(p_op, acc, l_i, v_smem, k_ready, v_ready, empty, q_empty,
                                   c, n_blocks, PAIRS)
    return acc, l_i


@gluon.jit
def _gl_pws_tile(t, BH, N_M, group, S, WG: gl.constexpr, CONSUMERS: gl.constexpr,
                 BLOCK_N: gl.constexpr):
    # tile t's head, this consumer's first query row, the tile's key blocks and how many of
    # them lie wholly below that row (no mask)
    bh, pid_m = _gl_tile_of(t, BH, N_M, group)
    start_m = pid_m * (64 * CONSUMERS)
    first = start_m + 64 * WG
    return bh, first, gl.cdiv(gl.minimum(start_m + 64 * CONSUMERS, S), BLOCK_N), first // BLOCK_N


@gluon.jit
def _gl_rows_store(ob, O, bh, H, S, first, sob, soh, sos, sod):
    # the 64 rows in O's buffer `ob` to rows first.. of the output through pointers, 16 rows
    # at a time (few registers), rows past S left out
    D: gl.constexpr = ob.type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [256 // D, D // 8], [4, 1], [1, 0])
    o_base = O + (bh // H).to(gl.int64) * sob + (bh % H).to(gl.int64) * soh
    cols = gl.arange(0, D, gl.SliceLayout(0, layout))
    for r in gl.static_range(0, 64, 16):
        rows = first + r + gl.arange(0, 16, gl.SliceLayout(1, layout))
        gl.store(o_base + rows[:, None] * sos + cols[None, :] * sod,
                 ob.slice(r, 16).load(layout), mask=(rows[:, None] < S) & (cols[None, :] < D))


@gluon.jit
def _gl_pws_out(acc, l_i, o_desc, O, ob, bh, H, S, first, sob, soh, sos, sod,
                o_layout: gl.constexpr):
    # a consumer's output rows: by TMA store from its O buffer `ob` (the store waited for only
    # before the buffer is written again); a tile past S from the same buffer by pointers
    # (a TMA store would write the next head's rows); all by pointers for EPILOGUE "ptr"
    out = (acc * (1.0 / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)))[:, None])
    out = out.to(ob.dtype)
    if o_desc is None:
        _gl_ptr_store(out, O, bh, H, S, first, sob, soh, sos, sod, o_layout)
    else:
        tma.store_wait(0)  # the last tile's store has left the buffer
        ob.store(out)
        if first + 64 <= S:
            fence_async_shared()
            _tma_store(o_desc, [bh * S + first, 0], ob)
        else:
            _gl_rows_store(ob, O, bh, H, S, first, sob, soh, sos, sod)


@gluon.jit
def _gl_pws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                    q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                    early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod,
                    WG: gl.constexpr):
    # one consumer warpgroup: query rows 64 * WG .. + 63 of each of the CTA's tiles
    D: gl.constexpr = k_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    CONSUMERS: gl.constexpr = q_smem.type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    # DIAG_HALF (`half` not None: a partition takes a constexpr number as a tensor in
    # Triton 3.6, None as None): the first of two consumers on 128-key blocks takes its
    # last key block's first half alone (_gl_pws_last)
    HALF: gl.constexpr = half is not None and WG == 0 and CONSUMERS == 2 and BLOCK_N == 128
    # PINGPONG (`pingpong` not None, two consumers): they issue their MMAs in turns
    # (_gl_turn_wait), a turn a key block: as many in each consumer's tile (with HALF, the
    # first consumer's diagonal half is one), the last P V outside them; consumer 1 hands
    # consumer 0 the first turn
    TURN: gl.constexpr = WG if pingpong is not None and CONSUMERS == 2 else -1
    # KV_PAIRS (`pairs` not None): a tile's ring items are K_0, (K_1, V_0), .. (K_(n-1),
    # V_(n-2)), V_(n-1), one barrier each way an item (_gl_pair_load); c counts items
    PAIRS: gl.constexpr = pairs is not None
    if TURN == 1:
        _gl_turn_pass(TURN)
    q = q_smem.index(WG)
    c = 0
    i = 0
    row = sched + gl.program_id(0) * width
    t = gl.load(row)
    while t >= 0:
        bh, first, n_blocks, n_full = _gl_pws_tile(t, BH, N_M, group, S, WG, CONSUMERS,
                                                   BLOCK_N)
        m_i = gl.full([64], float("-inf"), gl.float32, row_s)
        l_i = gl.zeros([64], gl.float32, row_s)
        acc = gl.zeros([64, D], gl.float32, o_layout)
        s = gl.zeros([64, BLOCK_N], gl.float32, s_layout)
        mbarrier.wait(q_ready.index(WG), i & 1)
        s, p_op, m_i, l_i = _gl_wg_first_block(q, s, m_i, l_i, k_smem, k_ready, empty, c,
                                               n_full, first, S, qk_scale, s_layout, o_layout,
                                               TURN)
        n_loop = n_blocks - 1
        if HALF:
            n_loop = n_blocks - 1 - (n_blocks > 1).to(gl.int32)  # the last one apart
        s, p_op, acc, m_i, l_i = _gl_wg_key_blocks(q, s, p_op, acc, m_i, l_i, k_smem, v_smem,
                                                   k_ready, v_ready, empty, c, n_loop, n_full,
                                                   first, S, qk_scale, s_layout, o_layout, TURN,
                                                   early is not None, PAIRS)
        acc, l_i = _gl_pws_last(q, p_op, acc, m_i, l_i, k_smem, v_smem, k_ready, v_ready, empty,
                                q_empty.index(WG), c, n_blocks, first, S, qk_scale, HALF, TURN,
                                PAIRS)
        _gl_pws_out(acc, l_i, o_desc, O, o_smem.index(WG), bh, H, S, first, sob, soh, sos,
                    sod, o_layout)
        c += n_blocks
        if PAIRS:
            c += 1  # V_(n-1)'s item
        i += 1
        t = gl.load(row + i)
    if o_desc is not None:
        tma.store_wait(0)


@gluon.jit
def _gl_pws_consumer0(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                      q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                      early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod):
    _gl_pws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                    q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                    early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod, 0)


@gluon.jit
def _gl_pws_consumer1(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                      q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                      early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod):
    _gl_pws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                    q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                    early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod, 1)


@gluon.jit
def _gl_attn_fwd_pws(q_desc, k_desc, v_desc, o_desc, O, sched, width, sm_scale, H, S, BH, N_M,
                     group, sob, soh, sos, sod, D: gl.constexpr, BLOCK_N: gl.constexpr,
                     STAGES: gl.constexpr, CONSUMERS: gl.constexpr,
                     CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
                     DIAG_HALF: gl.constexpr, PINGPONG: gl.constexpr,
                     EARLY_RESCALE: gl.constexpr, KV_PAIRS: gl.constexpr):
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, 64, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    # O's staging for the TMA store (8 rows, unused, for the pointer store)
    o_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, 64 if o_desc is not None else 8, D],
                                       q_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    for w in gl.static_range(CONSUMERS):
        mbarrier.init(q_ready.index(w), count=1)
        mbarrier.init(q_empty.index(w), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
        mbarrier.init(empty.index(STAGES + i), count=CONSUMERS)
    args = (q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem, q_ready,
            q_empty, k_ready, v_ready, empty, sched, width, q_desc if DIAG_HALF else None,
            q_desc if PINGPONG else None, q_desc if EARLY_RESCALE else None,
            q_desc if KV_PAIRS else None, H, S, BH, N_M, group, sm_scale * 1.4426950408889634,
            sob, soh, sos, sod)
    if CONSUMERS == 2:
        gl.warp_specialize([(_gl_pws_consumer0, args), (_gl_pws_consumer1, args),
                            (_gl_pws_loader, args)], [4, 1], [CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([(_gl_pws_consumer0, args), (_gl_pws_loader, args)], [1],
                           [LOADER_REGS])


_SCHEDULES = {}
_SCHEDULE_KEPT = 64


def _schedule(BH, n_m, block_m, S, device):
    """The persistent kernel's tiles per program, a row each, -1 after a program's last: the
    launch order's tiles (_gl_tile_of's) dealt out in turn to the program that would be
    free first, a tile costing its key blocks and one for its start and end (what the GPU's
    own scheduler does with a grid of one program per tile). One table per shape and
    device, made once (about 0.2 s of host time at 262144 tiles): it depends on the shape
    alone. The last _SCHEDULE_KEPT shapes' tables are kept."""
    key = (BH, n_m, block_m, S, device)
    table = _SCHEDULES.pop(key, None)
    if table is None:
        # plain Python numbers: torch's arithmetic here would be compute outside a kernel
        cost = [(min((m + 1) * block_m, S) + BLOCK_N - 1) // BLOCK_N + 1 for m in range(n_m)]
        programs = min(BH * n_m, _num_sms(device))
        loads = [(0, p) for p in range(programs)]
        tiles = [[] for _ in range(programs)]
        t = 0
        for g in range(0, BH, HEAD_GROUP):  # _gl_tile_of's order
            heads = min(BH - g, HEAD_GROUP)
            for m in range(n_m - 1, -1, -1):
                for _ in range(heads):
                    load, p = loads[0]
                    tiles[p].append(t)
                    heapq.heapreplace(loads, (load + cost[m], p))
                    t += 1
        width = max(len(row) for row in tiles) + 1
        rows = [row + [-1] * (width - len(row)) for row in tiles]
        table = torch.tensor(rows, dtype=torch.int32, device=device)
        while len(_SCHEDULES) >= _SCHEDULE_KEPT:
            _SCHEDULES.pop(next(iter(_SCHEDULES)))
    _SCHEDULES[key] = table  # the most recent last
    return table



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


def kernel(q, k, v):
    o = torch.empty_like(q)
    if _wgmma_ok(q, k, v):
        _launch_wgmma(q, k, v, o)
    else:
        _launch_pointers(q, k, v, o, *_blocks(q.shape[2], q.shape[3]))
    return o
