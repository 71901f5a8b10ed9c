"""Nsight Compute reports captured on the H200 (tests/data/ncu, see its README.txt),
summarised on the CPU as a run records them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import DATA

from kernelladder.engine.record import events as ev
from kernelladder.verifier.host.profile import (
    L2_HIT_METRIC,
    SECTIONS,
    STALL_METRICS,
    ProfileSummary,
    export_commands,
    jit_kernels,
    parse_details,
    profile_command,
    summarize,
)

NCU = DATA / "ncu"


def _summary(name: str) -> ProfileSummary:
    details = (NCU / f"{name}_details.csv").read_text()
    raw = (NCU / f"{name}_raw.csv").read_text()
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
    header = (NCU / "rmsnorm_details.csv").read_text().splitlines()[0]
    assert parse_details(header + "\n") == []
    assert summarize(header + "\n") is None


# the details page names a section by its title; --section takes its identifier
SECTION_TITLES = {
    "SpeedOfLight": "GPU Speed Of Light Throughput",
    "MemoryWorkloadAnalysis": "Memory Workload Analysis",
    "Occupancy": "Occupancy",
    "LaunchStats": "Launch Statistics",
    "WarpStateStats": "Warp State Statistics",
}


def _only_collected(details: str, raw: str) -> tuple[str, str]:
    """The full-set report's exports cut to what profile_command collects."""
    import csv
    import io

    keep = set(SECTIONS) | {SECTION_TITLES[s] for s in SECTIONS}
    rows = list(csv.DictReader(io.StringIO(details)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows(r for r in rows if r["Section Name"] in keep)
    table = list(csv.reader(io.StringIO(raw)))
    wanted = {"ID", L2_HIT_METRIC, *STALL_METRICS}
    cols = [i for i, name in enumerate(table[0]) if name in wanted]
    cut = io.StringIO()
    csv.writer(cut, quoting=csv.QUOTE_ALL).writerows([[r[i] for i in cols] for r in table])
    return out.getvalue(), cut.getvalue()


@pytest.mark.parametrize("name", ["rmsnorm", "matmul"])
def test_the_collected_sections_give_the_full_sets_summary(name):
    full = _summary(name)
    details, raw = _only_collected(
        (NCU / f"{name}_details.csv").read_text(), (NCU / f"{name}_raw.csv").read_text()
    )
    cut = summarize(details, raw)
    assert cut is not None and cut.stalls == full.stalls
    # every figure the summary, the Profile tab and the prompts show; ncu's advice may
    # come from a rule of another section
    assert replace(cut, recommendation="") == replace(full, recommendation="")


def test_ncu_commands():
    cmd = profile_command("/usr/local/cuda/bin/ncu", "/run/profiles/3", ["python3", "-m", "x"])
    assert cmd[:3] == ["/usr/local/cuda/bin/ncu", "--profile-from-start", "off"]
    assert cmd[-3:] == ["python3", "-m", "x"]
    # only what the summary reads: its sections and the raw page's stall ratios
    assert "--set" not in cmd
    # the clocks as the timer sees them (ncu's default locks them to base)
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    sections = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"]
    assert sections == list(SECTIONS)
    assert "MemoryWorkloadAnalysis" not in sections  # its one figure, the L2 hit rate, below
    stalls = cmd[cmd.index("--metrics") + 1].split(",")
    assert L2_HIT_METRIC in stalls
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in stalls
    assert cmd[cmd.index("--launch-count") + 1] == "1" and "--kernel-name" not in cmd
    named = profile_command("ncu", "r", ["python3"], ("_fwd", "_bwd"))
    assert named[named.index("--kernel-name") + 1] == "regex:^(_fwd|_bwd)$"
    assert named[named.index("--launch-count") + 1] == "2"
    details, raw = export_commands("ncu", "r.ncu-rep")
    assert details[-2:] == ["--page", "details"] and raw[-1] == "raw"


def test_the_kernel_filter_names_gluon_kernels_too():
    # a Gluon kernel (@gluon.jit) is what the GPU runs for attention's first family: left
    # out of the filter, ncu profiled nothing ("No kernels were profiled")
    source = (
        "@triton.jit\ndef _pointer_fwd(X):\n    pass\n\n"
        "@gluon.jit\ndef _gl_fwd(X, N: gl.constexpr):\n    pass\n\n"
        "@triton.autotune(configs=[], key=[])\n@triton.jit(do_not_specialize=['n'])\n"
        "def _tuned(X, n):\n    pass\n\n"
        "@jit\ndef _bare(X):\n    pass\n\n"
        "def jitter():\n    pass\n"
    )
    assert jit_kernels(source) == ("_pointer_fwd", "_gl_fwd", "_tuned", "_bare")
    from kernelladder.ops.registry import catalog

    wgmma = next(f for f in catalog()["attention"] if f.name == "flash-wgmma")
    names = jit_kernels(wgmma.render(wgmma.start))
    assert {"_gl_attn_fwd_pws", "_gl_attn_fwd_ws", "_gl_attn_fwd", "_attn_fwd"} <= set(names)


# --- profile_candidate's plumbing, with a stand-in for ncu ---------------------------------
# No GPU and no ncu on these machines: a small script plays ncu's command line (writes the
# report file; `--import ... --csv --page X` prints the CSV captured on the H200), so the
# command building, the exports and the ERR_NVGPUCTRPERM path are exercised for real.

FAKE_NCU = """#!{python}
import sys, pathlib, time
args = sys.argv[1:]
data = pathlib.Path({data!r})
if {refuse_metrics!r} and "--metrics" in args:
    print("==ERROR== Failed to find metric smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio")
    sys.exit(1)
if {blocked!r}:
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
if "--import" in args:
    page = args[args.index("--page") + 1]
    sys.stdout.write((data / f"rmsnorm_{{page}}.csv").read_text())
    sys.exit(0)
base = args[args.index("-o") + 1]
assert args[args.index("--profile-from-start") + 1] == "off"
assert "kernelladder.verifier.worker.profile_driver" in args and "drive" in args
def phase(say, wait=None):  # the driver's handshake, played
    pathlib.Path(base + say).touch()
    while wait and not pathlib.Path(base + wait).exists():
        time.sleep(0.005)
phase(".ready", ".warm.go"); phase(".warm", ".replay.go"); phase(".done")
pathlib.Path(base + ".ncu-rep").write_bytes(b"report")
print("==PROF== Disconnected from process 1")
"""


def _fake_ncu(tmp_path, monkeypatch, blocked: bool, refuse_metrics: bool = False) -> None:
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(
        FAKE_NCU.format(
            python=sys.executable, data=str(NCU), blocked=blocked, refuse_metrics=refuse_metrics
        )
    )
    ncu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def test_profile_candidate_exports_and_summarises(tmp_path, monkeypatch):
    from kernelladder.verifier.host.profile import profile_candidate

    _fake_ncu(tmp_path, monkeypatch, blocked=False)
    out = tmp_path / "run" / "profiles"
    outcome = profile_candidate("rmsnorm", "def kernel(x, weight): ...\n", out, "7")
    assert outcome.status == "ok", outcome.reason
    assert outcome.summary == _summary("rmsnorm")
    assert outcome.report == str(out / "7.ncu-rep")
    for kept in ("7.ncu-rep", "7_details.csv", "7_raw.csv", "7.py", "7.op.json", "7.ncu.log"):
        assert (out / kept).exists(), kept


def test_profile_candidate_with_counters_blocked(tmp_path, monkeypatch):
    from kernelladder.verifier.host.profile import profile_candidate

    _fake_ncu(tmp_path, monkeypatch, blocked=True)
    outcome = profile_candidate("rmsnorm", "x = 1\n", tmp_path / "p", "0")
    assert outcome.status == "unavailable"
    assert "ERR_NVGPUCTRPERM" in outcome.reason


def test_a_gpu_without_a_stall_metric_is_profiled_with_the_sections_alone(tmp_path, monkeypatch):
    from kernelladder.verifier.host.profile import profile_candidate

    _fake_ncu(tmp_path, monkeypatch, blocked=False, refuse_metrics=True)
    outcome = profile_candidate("rmsnorm", "def kernel(x, weight): ...\n", tmp_path / "p", "2")
    assert outcome.status == "ok", outcome.reason
    assert outcome.summary == _summary("rmsnorm")
