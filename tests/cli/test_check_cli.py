"""`kernelladder check` as a user runs it: real CLI process, real worker, real interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import ROOT

from kernelladder.cli import main

CHEATS = ROOT / "tests" / "cheats"
SECRET = "sk-ant-FAKE-kl-secret-7f3a9c2e1b"


def check(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 240):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120", **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", "check", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def test_pass_json_has_the_documented_keys():
    proc = check("rmsnorm", str(CHEATS / "honest_rmsnorm.py"), "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert out["verdict"] == "pass" and out["gate"] is None
    assert set(out["gates"]) == {
        "load",
        "fence",
        "correctness",
        "anti-cheat",
        "determinism",
        "speed",
    }
    for gate in out["gates"].values():
        assert {"status", "detail", "evidence"} <= set(gate)
    assert out["gates"]["speed"]["status"] == "skipped"
    assert out["speedup"] is None and out["times"] == [] and out["floor_fraction"] is None
    assert set(out["feedback"]) == {"expected", "saw", "fence", "dead_ends"}
    assert out["feedback"]["dead_ends"] == []


def test_fail_prints_a_readable_report_and_exits_1():
    proc = check("rmsnorm", str(CHEATS / "wrong_result.py"), "--device", "cpu")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "FAIL" in proc.stdout and "failed at correctness" in proc.stdout
    for word in ("EXPECTED", "SAW", "FENCE", "DEAD ENDS", "out of tolerance"):
        assert word in proc.stdout


def test_kernelbench_problem_file(tmp_path):
    problem = ROOT / "examples" / "kernelbench" / "relu_bias_scale.py"
    cand = ROOT / "examples" / "kernelbench" / "relu_bias_scale_triton.py"
    proc = check(str(problem), str(cand), "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["verdict"] == "pass"


def test_hang_becomes_a_timeout_verdict_within_the_limit():
    started = time.monotonic()
    proc = check("rmsnorm", str(CHEATS / "hang.py"), "--json", "--device", "cpu", "--timeout", "6")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["kind"] == "timeout" and out["gate"] == "timeout"
    assert elapsed < 60  # generous: CLI start + worker start + 6 s


@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_secrets_never_reach_any_output(as_json, sandbox):
    # The candidate reads its own env (scrubbed), /proc/<ppid>/environ (the CLI's, or the
    # worker template's, scrubbed too) and every other environ it can (the CLI's among
    # them), prints what it found at import and in its call, then raises with it. With
    # the sandbox on the reads are denied; with it off the redaction stops the leak.
    args = ["rmsnorm", str(CHEATS / "secret_leak.py"), "--device", "cpu", "--sandbox", sandbox]
    proc = check(*args, *(["--json"] if as_json else []), env_extra={"KL_TEST_API_KEY": SECRET})
    assert proc.returncode == 1
    everything = proc.stdout + proc.stderr
    assert SECRET not in everything and "kl-secret" not in everything
    walled = sandbox == "auto" and "sandbox: read of /proc/" in everything
    if sandbox == "off" or not walled:  # it really did find the secret, and it was scrubbed
        assert "[REDACTED]" in everything
    if as_json:
        verdict = json.loads(proc.stdout)
        assert verdict["gate"] == "anti-cheat"  # the read of the caller's /proc is named
        assert verdict["gates"]["anti-cheat"]["detail"].startswith("sandbox: read of /proc/")


# --- bad usage: exit 2, one line, no traceback -------------------------------------------------


def _one_line_usage_error(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return lines[0]


def test_unknown_op_is_a_usage_error():
    line = _one_line_usage_error(check("nosuchop", str(CHEATS / "honest_rmsnorm.py")))
    assert "unknown op 'nosuchop'" in line


def test_bad_flag_is_a_usage_error():
    line = _one_line_usage_error(check("rmsnorm", str(CHEATS / "honest_rmsnorm.py"), "--fast"))
    assert "--fast" in line


def _main_usage_error(capsys, *argv: str) -> str:
    try:
        code = main(["check", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    return lines[0]


def test_missing_or_unreadable_files_are_usage_errors(capsys, tmp_path):
    assert "candidate file not found" in _main_usage_error(
        capsys, "rmsnorm", str(tmp_path / "no.py")
    )
    assert "not found" in _main_usage_error(
        capsys, str(tmp_path / "problem.py"), str(CHEATS / "no_triton.py")
    )
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert "not UTF-8" in _main_usage_error(capsys, "rmsnorm", str(binary))
    assert "is not a file" in _main_usage_error(capsys, "rmsnorm", str(tmp_path))


def test_bad_numbers_are_usage_errors(capsys):
    cand = str(CHEATS / "honest_rmsnorm.py")
    assert "--timeout" in _main_usage_error(capsys, "rmsnorm", cand, "--timeout", "0")
    assert "--min-speedup" in _main_usage_error(capsys, "rmsnorm", cand, "--min-speedup", "-1")
    assert "invalid float" in _main_usage_error(capsys, "rmsnorm", cand, "--timeout", "soon")


def test_cuda_without_a_gpu_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    line = _main_usage_error(
        capsys, "rmsnorm", str(CHEATS / "honest_rmsnorm.py"), "--device", "cuda"
    )
    assert "no CUDA GPU" in line


def test_problem_file_without_model_is_a_usage_error(capsys, tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text("def get_inputs():\n    return []\n")
    assert "missing Model" in _main_usage_error(capsys, str(problem), str(CHEATS / "no_triton.py"))


def test_report_shows_times_speedups_floor_and_evidence():
    from rich.console import Console

    from kernelladder.app.verdict_report import render
    from kernelladder.verifier.contract.verdict import Feedback, GateResult, ShapeTiming, Verdict

    timing = ShapeTiming(
        "4096x4096 bf16", 0.5, 0.07, 0.012, 7.14, 0.0159, 0.227, {"F.rms_norm": 0.06}
    )
    gates = {g: GateResult("pass", f"{g} ok") for g in ("load", "fence", "correctness")}
    gates["anti-cheat"] = GateResult(
        "fail", "speedup 12.0x over the best library baseline", {"problems": {"a": "b"}}
    )
    verdict = Verdict(
        "fail",
        "fail",
        "anti-cheat",
        gates,
        "rmsnorm",
        "cuda",
        "h",
        feedback=Feedback("time to beat 0.5 ms", "0.07 ms", "- rules", ("tried BLOCK=64",)),
        speedup=7.14,
        speedup_vs={"F.rms_norm": 0.86},
        floor_fraction=0.227,
        timings=(timing,),
        flags=("speedup-over-10x-best-library",),
        environment={"gpu": "NVIDIA H200", "torch": "2.11"},
    )
    console = Console(record=True, width=160)
    render(verdict, console)
    text = console.export_text()
    for expected in (
        "FAIL",
        "failed at anti-cheat",
        "7.140x",
        "0.86x vs F.rms_norm",
        "23% of floor",
        "4096x4096 bf16",
        "0.0700",
        "F.rms_norm",
        "NVIDIA H200",
        "tried BLOCK=64",
        "speedup-over-10x-best-library",
        "anti-cheat evidence",
    ):
        assert expected in text, expected


def test_check_json_carries_the_standing_first_fields_of_a_recorded_h200_verdict():
    from kernelladder.cli.check import verdict_json
    from kernelladder.verifier.contract.verdict import Verdict

    path = ROOT / "tests/data/old-logs/rmsnorm-2026-12-01/attempts/30.json"
    d = verdict_json(Verdict.from_dict(json.loads(path.read_text())))
    assert round(d["vs_best"], 2) == 1.07 and d["speedup_over"] == "reference"
    assert d["standing_shapes"]["32768x8192 bf16"]["standing"] == "tie"
    assert 0.01 < d["noise_of_geomean"] < d["noise"] / 2  # the geomean's, not the noisiest
