"""The Hopper attention families (flash-ring, flash-persistent) under the real Triton
interpreter: each passes the verifier at the CPU suite (causal mask at the diagonal, tails,
S not a multiple of the tile, bf16 and fp16) and at unseen shapes; their descriptor path is
the one that computes (not the pointer fallback), across several query tiles, where the
unmasked stage and both output stores run; the fallback serves tensors a descriptor cannot
take. The pipeline depth and warp specialisation are GPU-only (the interpreter runs
`tl.range` as a plain loop): bench/attention_search.py measures them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import load_source

from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import ProposalContext, VerifyRequest
from kernelladder.ops.registry import catalog, get_op, knowledge
from kernelladder.verifier.host.client import verify_sync

FAMILIES = {f.name: f for f in catalog()["attention"]}
HOPPER = ("flash-ring", "flash-persistent")
# each family's start and points that take its other code paths (head after head;
# 128-row tiles over 32-key blocks: several diagonal blocks; 128-key blocks over 64-row
# tiles: the masked stage starts a block before the tile; two programs per SM; WS: the
# descriptors made in the kernel)
POINTS = [
    ("flash-ring", {}),
    ("flash-ring", {"HEAD_GROUP": 1, "BLOCK_M": 128, "BLOCK_N": 32, "NUM_WARPS": 8, "WS": True}),
    ("flash-ring", {"BLOCK_N": 128}),
    ("flash-persistent", {}),
    ("flash-persistent",
     {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_WARPS": 8, "PROGRAMS_PER_SM": 1, "NUM_STAGES": 2,
      "WS": "outer"}),
]  # fmt: skip


def _source(name: str, over: dict) -> str:
    family = FAMILIES[name]
    point = {**family.start, **over}
    assert family.valid(point)
    return family.render(point)


def _causal_attention(q, k, v):
    s = q.shape[2]
    scores = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v.double()


@pytest.mark.parametrize(("name", "over"), POINTS, ids=lambda x: str(x))
def test_hopper_family_passes_the_verifier_at_the_cpu_suite_and_unseen_shapes(name, over):
    request = VerifyRequest(
        op="attention", source=_source(name, over), device="cpu", unseen_seed=29
    )
    verdict = verify_sync(request, timeout_s=600).to_dict()
    gates = verdict["gates"]
    assert verdict["verdict"] == "pass", (verdict["gate"], gates.get(verdict["gate"]))
    detail = gates["correctness"]["detail"]
    assert "3 shapes" in detail and "2 unseen shapes" in detail, detail
    assert gates["determinism"]["status"] == "pass"


def _no_pointer_kernel(*args, **kwargs):
    raise AssertionError("the pointer fallback ran")


@pytest.mark.parametrize(("name", "over"), POINTS, ids=lambda x: str(x))
def test_hopper_family_computes_through_descriptors_across_query_tiles(name, over, tmp_path):
    module = load_source(_source(name, over), tmp_path, f"hopper_{POINTS.index((name, over))}")
    module._launch_pointers = _no_pointer_kernel
    gen = torch.Generator().manual_seed(29)
    # S=150: full tiles (unmasked stage, descriptor store) and a tail tile (pointer store);
    # S=128: only full tiles; D=24 pads the head dim to 32; fp16 inputs
    for b, h, s, d, dtype in ((1, 3, 150, 16, torch.float32), (2, 1, 128, 24, torch.float32),
                              (1, 2, 96, 16, torch.float16)):  # fmt: skip
        q, k, v = (torch.randn(b, h, s, d, generator=gen).to(dtype) for _ in range(3))
        o = module.kernel(q, k, v)
        assert o.shape == q.shape and o.dtype == dtype
        tol = (
            {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 4e-3, "atol": 4e-3}
        )
        torch.testing.assert_close(
            o.double(), _causal_attention(q, k, v), **tol, msg=f"{name} {over} {s}x{d}"
        )


def test_tensors_a_descriptor_cannot_take_run_the_pointer_kernel(tmp_path):
    for name in HOPPER:
        module = load_source(_source(name, {}), tmp_path, f"fallback_{name.replace('-', '_')}")
        gen = torch.Generator().manual_seed(30)
        # [B, S, H, D] transposed to [B, H, S, D]: not contiguous, so no descriptor
        q, k, v = (torch.randn(1, 70, 2, 16, generator=gen).transpose(1, 2) for _ in range(3))
        assert not module._tma_ok(q, k, v)
        torch.testing.assert_close(
            module.kernel(q, k, v).double(), _causal_attention(q, k, v), rtol=1e-4, atol=1e-5
        )


ORDER_PROBE = """

@triton.jit
def _order_probe(out, BH, N_M, GROUP: tl.constexpr):
    t = tl.program_id(0)
    bh, pid_m = _tile_of(t, BH, N_M, GROUP)
    tl.store(out + 2 * t, bh)
    tl.store(out + 2 * t + 1, pid_m)
"""


def test_the_launch_order_covers_every_tile_longest_first_within_head_groups(tmp_path):
    # _tile_of, run by the interpreter: every (head, q-tile) once for any group size (a
    # last group smaller than the rest included), each group's heads together, and inside
    # a group the query tiles from the last (longest) down
    module = load_source(_source("flash-ring", {}) + ORDER_PROBE, tmp_path, "tile_order")
    order = module._order_probe
    bh, n_m = 7, 5
    for group in (1, 4, 16):
        out = torch.full((bh * n_m * 2,), -1, dtype=torch.int32)
        order[(bh * n_m,)](out, bh, n_m, group)
        tiles = [tuple(p) for p in out.view(-1, 2).tolist()]
        assert sorted(tiles) == [(h, m) for h in range(bh) for m in range(n_m)], group
        for g in range(0, bh, group):
            heads = range(g, min(g + group, bh))
            span = tiles[g * n_m : (g + len(heads)) * n_m]
            assert {h for h, _ in span} == set(heads), (group, g)
            assert [m for _, m in span] == sorted((m for _, m in span), reverse=True)


def test_the_api_prompt_for_attention_carries_the_search_knowledge():
    text = knowledge("attention")
    for name in FAMILIES:
        assert f"- {name}: " in text
    assert "WS in [False], True" in text and "only on" in text
    assert knowledge("kv_quant") == ""  # no NOTES: no block
    op = get_op("attention").describe()
    ctx = ProposalContext(
        op=op, branch_id="b1", strategy="flash-ring", parent_source="", parent_attempt=None,
        parent_verdict=None, feedback={}, dead_ends=(), history=(), hints="", device="cuda",
    )  # fmt: skip
    _, user = build_prompt(ctx)
    assert "# KNOWLEDGE (what the built-in search knows)" in user
    assert "flash-persistent" in user
    _, other = build_prompt(dataclasses.replace(ctx, op={**op, "kind": "workspace"}))
    assert "what the built-in search knows" not in other


def test_three_branches_start_on_flash_wgmma_flash_ring_and_flash_tma():
    import asyncio

    from kernelladder.engine.proposers.search import SearchProposer
    from kernelladder.engine.record.upcast import search_header as parse_header

    search = SearchProposer()
    op = get_op("attention").describe()
    labels = search.strategies(op, 3)
    assert labels == ["flash-wgmma", "flash-ring", "flash-tma"]
    for i, label in enumerate(labels):
        ctx = ProposalContext(
            op=op, branch_id=f"b{i}", strategy=label, parent_attempt=None,
            parent_source="import triton\n", parent_verdict=None, feedback={}, dead_ends=(),
            hints="", device="cuda",
        )  # fmt: skip
        proposal = asyncio.run(search.propose(ctx))
        header = parse_header(proposal.source)
        assert header["family"] == label and header["params"] == FAMILIES[label].start
