"""attention's flash-wgmma family, persistent: one CTA per SM walks a table of tiles.

`GLUON_PERSISTENT` is source text that wgmma.py pastes into a candidate between
the per-tile kernels (whose helpers these kernels call: _gl_tile_of, _gl_wg_first_block,
_gl_wg_key_blocks, _gl_softmax, _gl_ptr_store) and the launch (`_launch_wgmma`, which calls
`_schedule` and `_gl_attn_fwd_pws`).
"""

from __future__ import annotations

_PWS_KERNELS = """


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
"""

# Gluon runs one function per warp-specialised partition: an entry for each consumer
# warpgroup, the same but for its number (WG)
_PWS_CONSUMER = """

@gluon.jit
def _gl_pws_consumer{wg}(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                      q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                      early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod):
    _gl_pws_consume(q_desc, k_desc, v_desc, o_desc, O, q_smem, k_smem, v_smem, o_smem,
                    q_ready, q_empty, k_ready, v_ready, empty, sched, width, half, pingpong,
                    early, pairs, H, S, BH, N_M, group, qk_scale, sob, soh, sos, sod, {wg})
"""

_PWS_LAUNCH = '''

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
'''

GLUON_PERSISTENT = (
    _PWS_KERNELS + "".join(_PWS_CONSUMER.format(wg=wg) for wg in (0, 1)) + _PWS_LAUNCH
)
