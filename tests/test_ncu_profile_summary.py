"""Nsight Compute reports captured on the H200 (tests/data/ncu, see its README.txt),
summarised on the CPU as a run records them."""

from __future__ import annotations

import json
from pathlib import Path

from kernelladder.engine import events as ev
from kernelladder.verifier.profile import (
    ProfileSummary,
    export_commands,
    parse_details,
    profile_command,
    summarize,
)

DATA = Path(__file__).resolve().parent / "data" / "ncu"


def _summary(name: str) -> ProfileSummary:
    details = (DATA / f"{name}_details.csv").read_text()
    raw = (DATA / f"{name}_raw.csv").read_text()
    summary = summarize(details, raw)
    assert summary is not None
    return summary


def test_memory_bound_rmsnorm_report():
    s = _summary("rmsnorm")
    assert s.kernel == "rmsnorm_rows" and s.kernels == 1
    assert s.duration_us == 254.21
    assert (s.dram_pct, s.sm_pct) == (85.82, 42.63) and s.bound == "memory"
    assert s.achieved_occupancy_pct == 46.57
    assert s.registers_per_thread == 64
    assert s.shared_mem_per_block_bytes == 32 + 1.02e3  # dynamic 32 B + driver 1.02 KB
    assert s.l2_hit_pct == 50.89
    assert [r for r, _ in s.stalls] == ["long_scoreboard", "barrier", "short_scoreboard"]
    assert s.recommendation.startswith("Out of the 536919808.0 bytes sent to the L2")
    assert (s.grid, s.block) == ("(32768, 1, 1)", "(256, 1, 1)")


def test_compute_bound_matmul_report():
    s = _summary("matmul")
    assert s.kernel == "matmul_tiles" and s.bound == "compute"
    assert s.registers_per_thread == 110
    assert s.shared_mem_per_block_bytes > 90_000
    assert s.stalls[0][0] == "barrier"
    assert "wave" in s.recommendation and s.recommendation.endswith("GPU.")


def test_summary_lines_and_event_round_trip():
    s = _summary("rmsnorm")
    text = "\n".join(s.lines())
    assert "DRAM 85.8% of peak, SM 42.6% of peak (memory-bound)" in text
    assert "top warp stalls: long scoreboard 8.33" in text
    event = ev.ProfileReady(attempt=0, branch_id="b1", reason="the start", summary=s.to_dict())
    again = ev.event_from_dict(json.loads(json.dumps(event.to_dict())))
    assert ProfileSummary.from_dict(again.summary) == s


def test_rows_without_a_kernel_give_no_summary():
    header = (DATA / "rmsnorm_details.csv").read_text().splitlines()[0]
    assert parse_details(header + "\n") == []
    assert summarize(header + "\n") is None


def test_ncu_commands():
    cmd = profile_command("/usr/local/cuda/bin/ncu", "/run/profiles/3", ["python3", "-m", "x"])
    assert cmd[:3] == ["/usr/local/cuda/bin/ncu", "--profile-from-start", "off"]
    assert cmd[-3:] == ["python3", "-m", "x"] and "SpeedOfLight" in cmd
    details, raw = export_commands("ncu", "r.ncu-rep")
    assert details[-2:] == ["--page", "details"] and raw[-1] == "raw"
