"""int8_matmul templates: (a int8 [M, K] @ b int8 [N, K]^T) exact in int32, times
scale_a[:, None] * scale_b[None, :], stored as bf16.

Families: a tiled matmul with a GROUP_M swizzle (tiles of neighbouring programs share
rows of `a` in L2), split-K for grids too small to fill the GPU (int32 partial sums in a
workspace, reduced exactly by a second kernel), and a persistent grid looping over tiles.
"""

from __future__ import annotations

from typing import Any

from kernelladder.ops.family import FOCUS_LARGE, FOCUS_SMALL, SM_COUNT_HELPER, Family, Param

_BLOCK_M = Param("BLOCK_M", (32, 64, 128, 256), resource=True)
_BLOCK_N = Param("BLOCK_N", (64, 128, 256), resource=True)
_BLOCK_K = Param("BLOCK_K", (64, 128, 256), resource=True)
_GROUP_M = Param("GROUP_M", (1, 4, 8, 16), focus=FOCUS_LARGE)
_WARPS = Param("NUM_WARPS", (4, 8), resource=True)
_STAGES = Param("NUM_STAGES", (2, 3, 4, 5), resource=True)
_PAD = Param(
    "PAD",
    (True, False),
    structural=True,
    focus=FOCUS_SMALL,
    doc="copy unaligned rows (K % 16 != 0) into padded aligned rows first",
    relevant=lambda dims: any(d["K"] % 16 for d in dims),
)

_TILE = '''
@triton.jit
def _tile_coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):
    # GROUP_M swizzle: consecutive tiles walk down a group of GROUP_M block-rows
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    group = tile // width
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % size_m
    pid_n = (tile % width) // size_m
    return pid_m, pid_n


@triton.jit
def _dot_tile(A, B, pid_m, pid_n, M, N, k_lo, k_hi, sam, sak, sbn, sbk,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              EVEN_K: tl.constexpr):
    # rows past M / N wrap around (loads stay in bounds; those results are never stored)
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = A + rm.to(tl.int64)[:, None] * sam + (k_lo + rk)[None, :] * sak
    b_ptrs = B + rn.to(tl.int64)[None, :] * sbn + (k_lo + rk)[:, None] * sbk
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k + rk)[None, :] < k_hi, other=0)
            b = tl.load(b_ptrs, mask=(k + rk)[:, None] < k_hi, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    return acc


@triton.jit
def _store_scaled(C, SA, SB, acc, pid_m, pid_n, M, N, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    sa = tl.load(SA + rm, mask=rm < M, other=0.0)
    sb = tl.load(SB + rn, mask=rn < N, other=0.0)
    c = acc.to(tl.float32) * (sa[:, None] * sb[None, :])
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(C + rm.to(tl.int64)[:, None] * scm + rn[None, :] * scn,
             c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _int8_mm(A, B, SA, SB, C, M, N, K, sam, sak, sbn, sbk, scm, scn,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _dot_tile(A, B, pid_m, pid_n, M, N, 0, K, sam, sak, sbn, sbk,
                    BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
    _store_scaled(C, SA, SB, acc, pid_m, pid_n, M, N, scm, scn, BLOCK_M, BLOCK_N)


@triton.jit
def _pad_rows(SRC, DST, K, KP, s_src, BLOCK: tl.constexpr):
    # copy one row into a 16-byte aligned row of KP (a multiple of BLOCK_K), zero-filled
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, KP, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(SRC + row * s_src + cols, mask=cols < K, other=0)
        tl.store(DST + row * KP + cols, v, mask=cols < KP)


def _aligned(a, b, K, block_k):
    """(a, b, K) with rows a whole number of BLOCK_K, when PAD and a row is unaligned:
    unaligned int8 rows cannot be loaded in 16-byte vectors."""
    if not PAD or (K % block_k == 0 and a.stride(1) == 1 and b.stride(1) == 1
                   and a.stride(0) % 16 == 0 and b.stride(0) % 16 == 0):
        return a, b, K
    kp = triton.cdiv(K, block_k) * block_k
    padded = []
    for t in (a, b):
        if t.stride(1) != 1:
            return a, b, K
        dst = torch.empty((t.shape[0], kp), dtype=t.dtype, device=t.device)
        block = min(1024, triton.next_power_of_2(kp))
        _pad_rows[(t.shape[0],)](t, dst, K, kp, t.stride(0), BLOCK=block, num_warps=4)
        padded.append(dst)
    return padded[0], padded[1], kp


def _blocks(M, N, K):
    # tl.dot needs 16 rows / 32 int8 k-elements at least; small M gets a small block
    block_m = min(BLOCK_M, max(16, triton.next_power_of_2(M)))
    block_n = min(BLOCK_N, max(16, triton.next_power_of_2(N)))
    block_k = min(BLOCK_K, max(32, triton.next_power_of_2(K)))
    return block_m, block_n, block_k


def _launch_tiled(a, b, scale_a, scale_b, c, M, N, K, block_m, block_n, block_k):
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    _int8_mm[(tiles,)](
        a, b, scale_a, scale_b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
        b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        EVEN_K=K % block_k == 0, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
'''


# The entry's start: the output and the blocks for the shape.
_ENTRY = """

def kernel(a, b, scale_a, scale_b):
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    block_m, block_n, block_k = _blocks(M, N, K)
    a, b, K = _aligned(a, b, K, block_k)"""

_TILED_LAUNCH = """
    _launch_tiled(a, b, scale_a, scale_b, c, M, N, K, block_m, block_n, block_k)
    return c
"""

_TILED = _TILE + _ENTRY + _TILED_LAUNCH

_SPLIT_K_KERNELS = """

@triton.jit
def _int8_mm_partial(A, B, WS, M, N, K, k_per_split, sam, sak, sbn, sbk,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = _dot_tile(A, B, pid_m, pid_n, M, N, k_lo, k_hi, sam, sak, sbn, sbk,
                    BLOCK_M, BLOCK_N, BLOCK_K, False)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    base = WS + split.to(tl.int64) * M * N
    tl.store(base + rm.to(tl.int64)[:, None] * N + rn[None, :], acc, mask=mask)


@triton.jit
def _int8_mm_reduce(WS, SA, SB, C, M, N, MN, scm, scn, SPLIT: tl.constexpr,
                    BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    # integer partial sums: exact and independent of order
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(WS + offs + s * MN, mask=mask, other=0)
    rm = offs // N
    rn = offs % N
    sa = tl.load(SA + rm, mask=mask, other=0.0)
    sb = tl.load(SB + rn, mask=mask, other=0.0)
    c = acc.to(tl.float32) * (sa * sb)
    tl.store(C + rm * scm + rn * scn, c.to(C.dtype.element_ty), mask=mask)
"""

_SPLIT_K_LAUNCH = """
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    k_blocks = triton.cdiv(K, block_k)
    split = min(SPLIT_K, k_blocks)
    if split < 2 or tiles * SPLIT_BELOW_FILL > _num_sms(a.device):
        # the tiles alone fill the GPU: no split
        _launch_tiled(a, b, scale_a, scale_b, c, M, N, K, block_m, block_n, block_k)
        return c
    k_per_split = triton.cdiv(k_blocks, split) * block_k
    split = triton.cdiv(K, k_per_split)
    ws = torch.empty((split, M, N), dtype=torch.int32, device=a.device)
    _int8_mm_partial[(tiles, split)](
        a, b, ws, M, N, K, k_per_split, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    block = 1024
    _int8_mm_reduce[(triton.cdiv(M * N, block),)](
        ws, scale_a, scale_b, c, M, N, M * N, c.stride(0), c.stride(1), SPLIT=split,
        BLOCK=block,
        num_warps=4,
    )
    return c
"""

_SPLIT_K = _TILE + _SPLIT_K_KERNELS + SM_COUNT_HELPER + _ENTRY + _SPLIT_K_LAUNCH

_PERSISTENT_KERNEL = """

@triton.jit
def _int8_mm_persistent(A, B, SA, SB, C, M, N, K, sam, sak, sbn, sbk, scm, scn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _dot_tile(A, B, pid_m, pid_n, M, N, 0, K, sam, sak, sbn, sbk,
                        BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
        _store_scaled(C, SA, SB, acc, pid_m, pid_n, M, N, scm, scn, BLOCK_M, BLOCK_N)
"""

_PERSISTENT_LAUNCH = """
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    programs = max(1, min(tiles, _num_sms(a.device) * PROGRAMS_PER_SM))
    _int8_mm_persistent[(programs,)](
        a, b, scale_a, scale_b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
        b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        EVEN_K=K % block_k == 0, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return c
"""

_PERSISTENT = _TILE + _PERSISTENT_KERNEL + SM_COUNT_HELPER + _ENTRY + _PERSISTENT_LAUNCH


def _fits(p) -> bool:
    smem = p["NUM_STAGES"] * (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"]
    acc_regs = p["BLOCK_M"] * p["BLOCK_N"] // (32 * p["NUM_WARPS"])
    return smem <= 200 * 1024 and acc_regs <= 128


_TILE_PARAMS = (_BLOCK_N, _BLOCK_M, _STAGES, _BLOCK_K, _WARPS, _GROUP_M, _PAD)
_TILE_START = {
    "PAD": True,
    "BLOCK_M": 128,
    "BLOCK_N": 256,
    "BLOCK_K": 128,
    "GROUP_M": 8,
    "NUM_WARPS": 8,
    "NUM_STAGES": 3,
}


def _family(
    name: str, summary: str, own: tuple[Param, ...], start: dict[str, Any], body: str
) -> Family:
    """An int8_matmul family: its own parameters, then the tile's (blocks, stages, warps,
    swizzle, padding) from their start values unless `start` moves them; what fits in
    shared memory and registers."""
    return Family(
        op="int8_matmul",
        name=name,
        summary=summary,
        params=(*own, *_TILE_PARAMS),
        start={**_TILE_START, **start},
        body=body,
        valid=_fits,
    )


FAMILIES: tuple[Family, ...] = (
    _family(
        "tiled",
        "tiled int8 tl.dot with int32 accumulation, GROUP_M swizzled tile order",
        (),
        {},
        _TILED,
    ),
    _family(
        "persistent",
        "a persistent grid (SMs x PROGRAMS_PER_SM) looping over swizzled tiles",
        (Param("PROGRAMS_PER_SM", (1, 2), focus=FOCUS_LARGE),),
        {"PROGRAMS_PER_SM": 1},
        _PERSISTENT,
    ),
    _family(
        "split-k",
        "split-K when the tiles cannot fill the GPU: exact int32 partials, reduced",
        (
            Param("SPLIT_K", (2, 4, 8, 16), structural=True, focus=FOCUS_SMALL),
            Param("SPLIT_BELOW_FILL", (1, 2, 4), focus=FOCUS_SMALL),
        ),
        {"SPLIT_K": 4, "SPLIT_BELOW_FILL": 1, "BLOCK_M": 64},
        _SPLIT_K,
    ),
)
