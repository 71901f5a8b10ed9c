"""The per-shape comparison with the fastest library baseline in verdict reports: a margin
inside the candidate's own timing noise reads as a tie, not a win. The H200 case is a
committed verdict (examples/h200-rmsnorm-search, attempt #10): at 32768x8192 it is 0.1 %
faster than torch.compile in its median, with 0.6 % noise."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from kernelladder.app.format import versus_fastest_baseline
from kernelladder.app.verdict_report import timings_table
from kernelladder.verifier.verdict import Verdict

H200_VERDICT = Path(__file__).resolve().parents[1] / "examples/h200-rmsnorm-search/attempts/10.json"


def test_faster_tie_slower_against_the_fastest_baseline():
    base = {"F.rms_norm": 0.40, "torch.compile": 0.25}
    assert versus_fastest_baseline(0.20, base, 0.01) == ("torch.compile", 1.25, "faster")
    name, ratio, word = versus_fastest_baseline(0.2495, base, 0.006)
    assert (name, word) == ("torch.compile", "tie") and ratio > 1.0  # faster by 0.2 %: a tie
    assert versus_fastest_baseline(0.2495, base, 0.0)[2] == "faster"  # no noise known
    assert versus_fastest_baseline(0.30, base, 0.05)[2] == "slower"
    assert versus_fastest_baseline(0.2510, base, 0.006)[2] == "tie"  # slower inside noise


def test_nothing_to_compare():
    assert versus_fastest_baseline(0.2, {}, 0.01) is None
    assert versus_fastest_baseline(None, {"torch.compile": 0.25}, 0.01) is None
    # a baseline that could not run is recorded as text, not a time
    assert versus_fastest_baseline(0.2, {"torch.compile": "failed: ..."}, 0.01) is None  # type: ignore[dict-item]


def test_the_check_report_says_tie_where_the_margin_is_inside_the_noise():
    verdict = Verdict.from_dict(json.loads(H200_VERDICT.read_text()))
    console = Console(width=200, record=True)
    console.print(timings_table(verdict))
    rows = {line.split()[0]: line for line in console.export_text().splitlines() if line.strip()}
    assert "tie (torch.compile)" in rows["32768x8192"]
    assert "faster (torch.compile)" in rows["4096x4096"]


def test_replay_prints_the_best_attempts_standing_per_shape(tmp_path):
    import subprocess
    import sys

    root = H200_VERDICT.parents[3]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelladder",
            "replay",
            str(root / "examples/h200-rmsnorm-search"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**__import__("os").environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "against the fastest library baseline" in line)
    assert lines[head].startswith("best #23 ")
    shapes = {line.split()[0]: line for line in lines[head + 1 : head + 6]}
    assert "tie (torch.compile)" in shapes["32768x8192"]
    assert "faster (torch.compile)" in shapes["4096x4096"]


def test_no_line_without_timings_or_verdict(tmp_path):
    from kernelladder.app.verdict_report import best_versus_line

    cpu_run = H200_VERDICT.parents[3] / "examples/cpu-rmsnorm-run"
    assert best_versus_line(cpu_run, 1) is None  # speed not measured on the CPU
    assert best_versus_line(tmp_path, 3) is None  # no attempts/3.json
    assert best_versus_line(tmp_path, None) is None
