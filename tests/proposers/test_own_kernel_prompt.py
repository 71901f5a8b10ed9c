"""What the api/code proposers are told about the user's kernel: the workspace's
knowledge/ within its budget, the HARDWARE the verifier judges on, the parent's PROFILE,
and the tune proposer's order of moves from a profile."""

from __future__ import annotations

import asyncio

from helpers import DATA, ROOT

from kernelladder.engine import load_op_info
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.proposers.tune import DOWN, UP, TuneProposer, profile_order
from kernelladder.engine.protocols import ProposalContext
from kernelladder.ops.workspace_files import knowledge_text
from kernelladder.verifier.host.profile import summarize

REPO = ROOT
EXAMPLE = REPO / "examples" / "own-kernel"
NCU = DATA / "ncu"


def _profile() -> dict:
    s = summarize((NCU / "rmsnorm_details.csv").read_text(), (NCU / "rmsnorm_raw.csv").read_text())
    assert s is not None
    return s.to_dict()


def _ctx(op: dict, **kw) -> ProposalContext:
    base = dict(
        op=op, branch_id="b1", strategy="tune:pattern", parent_attempt=0,
        parent_source=(EXAMPLE / "kernel.py").read_text(), parent_verdict=None, feedback={},
        dead_ends=(), hints="", device="cuda",
    )  # fmt: skip
    base.update(kw)
    return ProposalContext(**base)


def test_knowledge_is_cut_at_the_budget_and_listed(tmp_path):
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "a_notes.md").write_text("A" * 60)
    (folder / "b_paper.txt").write_text("B" * 100)
    (folder / "c_more.md").write_text("C" * 10)
    (folder / "figure.png").write_bytes(b"\x89PNG")
    text, files = knowledge_text(tmp_path, budget=100)
    assert "A" * 60 in text and "B" * 40 in text and "B" * 41 not in text and "C" not in text
    assert files == [
        "a_notes.md (60 chars)",
        "b_paper.txt (cut at 40 of 100 chars)",
        "c_more.md (left out: budget of 100 chars spent)",
        "figure.png (left out: not text/markdown)",
    ]


def test_workspace_knowledge_reaches_the_prompt(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("kernel.py", "inputs.py"):
        (ws / name).write_text((EXAMPLE / name).read_text())
    (ws / "knowledge").mkdir()
    (ws / "knowledge" / "notes.md").write_text("KNOWLEDGE_MARKER: erf is exact gelu")
    info = load_op_info(str(ws))
    assert info.description["knowledge_files"] == ["notes.md (35 chars)"]
    _, user = build_prompt(_ctx(info.description))
    assert "# KNOWLEDGE" in user and "KNOWLEDGE_MARKER" in user
    assert info.start_label == "your kernel (ws/kernel.py)"
    assert info.reference_note == "the reference is your original kernel (no reference.py)"


def test_hardware_and_profile_blocks():
    hardware = {
        "gpu": "NVIDIA H200", "cc": "9.0", "sms": 132, "triton": "3.6.0", "torch": "2.11.0",
        "cuda": "13.0", "rates": {"copy": 4.23e9, "bf16": 7.9e11},
    }  # fmt: skip
    info = load_op_info(str(EXAMPLE))
    _, user = build_prompt(_ctx(info.description, hardware=hardware, profile=_profile()))
    assert "# HARDWARE" in user
    assert "GPU: NVIDIA H200, compute capability 9.0, 132 SMs" in user
    assert "copy bandwidth 4.23 TB/s" in user and "bf16 matmul 790 TFLOP/s" in user
    assert "versions: triton 3.6.0, torch 2.11.0, cuda 13.0" in user
    assert "# PROFILE OF THE PARENT" in user and "(memory-bound)" in user
    _, plain = build_prompt(_ctx(info.description))
    assert "# HARDWARE" not in plain and "# PROFILE" not in plain


def test_a_profile_orders_the_tune_moves():
    memory_bound = _profile()
    assert profile_order("blocks", memory_bound) == (UP, DOWN)
    compute_bound = {**memory_bound, "dram_pct": 10.0, "sm_pct": 80.0}
    assert profile_order("blocks", compute_bound) == (DOWN, UP)
    low_occupancy = {**memory_bound, "achieved_occupancy_pct": 20.0}
    assert profile_order("warps", low_occupancy) == (DOWN, UP)
    info = load_op_info(str(EXAMPLE))
    proposal = asyncio.run(
        TuneProposer().propose(
            _ctx(info.description, strategy="tune:pattern", profile=low_occupancy)
        )
    )
    # memory-bound with low occupancy: a larger block or fewer warps first
    wanted = {"BLOCK_N": UP, "num_warps": DOWN}
    assert proposal.meta["changed"]
    for knob, (old, new) in proposal.meta["changed"].items():
        assert (UP if new > old else DOWN) == wanted[knob], proposal.move


def test_a_low_occupancy_profile_makes_search_shrink_resource_hungry_parameters_first():
    from dataclasses import replace as dc_replace

    from kernelladder.engine.proposers.search import SearchProposer
    from kernelladder.ops.registry import get_op

    attention = get_op("attention").describe()
    base = dict(
        op=attention, branch_id="b1", strategy="flash-split", feedback={}, dead_ends=(),
        hints="", device="cuda",
    )  # fmt: skip
    first = asyncio.run(
        SearchProposer().propose(
            ProposalContext(**base, parent_attempt=None, parent_source="", parent_verdict=None)
        )
    )
    after_start = ProposalContext(
        **base, parent_attempt=1, parent_source=first.source, parent_meta=first.meta,
        parent_verdict={"verdict": "pass", "gate": None, "gates": {}, "speedup": 3.0, "timings": []},
    )  # fmt: skip
    plain = asyncio.run(SearchProposer().propose(after_start))
    low = {**_profile(), "achieved_occupancy_pct": 12.0}
    shrunk = asyncio.run(SearchProposer().propose(dc_replace(after_start, profile=low)))
    family = next(f for f in SearchProposer()._families["attention"] if f.name == "flash-split")
    old = first.meta["params"]
    (changed,) = [k for k, v in shrunk.meta["params"].items() if v != old[k]]
    p = family.param(changed)
    assert p.resource and p.values.index(shrunk.meta["params"][changed]) < p.values.index(
        old[changed]
    )
    assert plain.meta["params"] != shrunk.meta["params"]
