"""attention's search families: causal softmax(q k^T / sqrt(D)) v for q, k, v [B, H, S, D].

Every family is a flash-attention forward (an online softmax over blocks of keys, the
blocks above the diagonal skipped); they differ in how the diagonal is handled, which
query blocks run first, how blocks are loaded (pointers, or tensor descriptors: TMA on
Hopper), how the K/V loop is pipelined (a `tl.range` ring, warp specialisation, Gluon's
warpgroup MMAs) and whether programs are persistent. Here are their parameters, what
fits in shared memory, and the table of families; the kernels' text lives in pointer.py,
ring.py and wgmma.py, and NOTES (notes.py) is what the api/code prompts are told.
"""

from __future__ import annotations

from typing import Any

from kernelladder.ops.attention.notes import NOTES as NOTES  # knowledge
from kernelladder.ops.attention.pointer import POINTER_BODY, POINTER_KERNELS, TMA_BODY
from kernelladder.ops.attention.ring import PERSISTENT_BODY, RING_BODY
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

_WGMMA_BODY = (
    POINTER_KERNELS
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


def _ring_family(**fields: Any) -> Family:
    """A family on the ring kernels (ring.py): their shared-memory bound, query rows and
    warps moved together, the pointer fallback's switches fixed."""
    return Family(op="attention", valid=_ring_fits, links=_LINKS, fixed=_POINTER_FALLBACK, **fields)


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
        Param(
            "NUM_STAGES", (2, 3, 4), resource=True, doc="shared-memory stages of the TMA K/V ring"
        ),
        Param(
            "WS",
            (False, True),
            structural=True,
            doc="a loader warp issues the TMA loads and each 64 query rows get their own "
            "consumer warpgroup (else every warp loads and computes in step)",
        ),
        Param(
            "BLOCK_M", (64, 128), resource=True, doc="query rows per program, one warpgroup per 64"
        ),
        _HEAD_GROUP,
        Param(
            "EPILOGUE",
            ("ptr", "tma"),
            structural=True,
            doc="how the output tile leaves: masked pointer stores, or by a TMA store from shared "
            "memory (Q's buffer; a persistent CTA's own O buffer; a tile past S by pointers)",
        ),
        Param(
            "PERSISTENT",
            (False, True),
            structural=True,
            doc="(warp-specialised only) one CTA per SM walks its tiles: the next tile's Q and K "
            "load while a tile ends, its O leaves by TMA store while the next one computes",
        ),
        Param(
            "FILL",
            (False, True),
            doc="where 128-row tiles are too few to fill the SMs (short sequences), 64-row tiles "
            "with one consumer instead",
        ),
        Param(
            "DIAG_HALF",
            (False, True),
            doc="(persistent, 128-row tiles on 128-key blocks) the first consumer takes only the "
            "first half of the diagonal key block, the half its rows can see",
        ),
        Param(
            "PINGPONG",
            (False, True),
            doc="(persistent, 128-row tiles) the two consumers issue their MMAs in turns through "
            "named barriers, each one's softmax beside the other's MMAs (FlashAttention-3's "
            "ping-pong)",
        ),
        Param(
            "EARLY_RESCALE",
            (False, True),
            doc="(persistent) the accumulator is rescaled to a key block's maxima just before "
            "that block's P V, beside the next Q K^T on the tensor cores (FlashAttention-3's "
            "order), instead of as soon as the P V before is done",
        ),
        Param(
            "KV_PAIRS",
            (False, True),
            doc="(persistent) K_(j+1) and V_j share a ring stage and its barriers: a consumer "
            "waits once and frees once a key block (both after that block's P V), where K and V "
            "have rings of their own (K freed as soon as its Q K^T is done)",
        ),
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


# The families that are the pointer kernel alone: their start's (BLOCK_M, BLOCK_N,
# NUM_WARPS, NUM_STAGES), and whether the diagonal is split off and the order reversed.
_POINTER_ONLY = {
    "flash-split": ((128, 64, 8, 3), True, False),
    "flash-masked": ((64, 64, 4, 3), False, False),
    "flash-lpt": ((128, 64, 8, 2), True, True),
}
_POINTER_SUMMARY = {
    "flash-split": "flash forward: unmasked key blocks below the diagonal, masked diagonal blocks",
    "flash-masked": "flash forward masking every key block up to the diagonal (simplest loop)",
    "flash-lpt": "flash forward with the longest (last) query blocks scheduled first",
}


def _pointer_family(name: str) -> Family:
    """A family that is the pointer kernel alone, its diagonal and block order fixed."""
    blocks, split_diag, reverse = _POINTER_ONLY[name]
    start = dict(zip(("BLOCK_M", "BLOCK_N", "NUM_WARPS", "NUM_STAGES"), blocks, strict=True))
    return Family(
        op="attention",
        name=name,
        summary=_POINTER_SUMMARY[name],
        params=(_BLOCK_N, _STAGES, _WARPS, _BLOCK_M, _EXP2),
        start={**start, "EXP2": True},
        body=POINTER_BODY,
        valid=_fits,
        links=_LINKS,
        fixed={"SPLIT_DIAG": split_diag, "REVERSE": reverse},
    )


FAMILIES: tuple[Family, ...] = (
    _WGMMA,
    _ring_family(
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
        body=RING_BODY,
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
        body=TMA_BODY,
        valid=_fits,
        links=_LINKS,
        # the pointer kernel (for tensors a descriptor cannot take) runs as flash-split
        fixed={"SPLIT_DIAG": True, "EXP2": True},
    ),
    _ring_family(
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
        body=PERSISTENT_BODY,
    ),
    *(_pointer_family(name) for name in _POINTER_ONLY),
)
