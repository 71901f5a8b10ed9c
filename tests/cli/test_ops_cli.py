"""`kernelladder ops`: the listing, --json, one op or problem file, bad input -> exit 2."""

from __future__ import annotations

import json

from helpers import ROOT

from kernelladder.cli import main
from kernelladder.ops.registry import BUILTIN_OPS

PROBLEM = ROOT / "examples" / "kernelbench" / "relu_bias_scale.py"


def test_ops_json_lists_every_builtin_with_suites(capsys):
    assert main(["ops", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["ops"]
    assert [o["name"] for o in listing] == list(BUILTIN_OPS)
    by_name = {o["name"]: o for o in listing}
    assert by_name["rmsnorm"]["signature"] == "kernel(x, weight) -> y"
    assert by_name["rmsnorm"]["library_baselines"] == ["F.rms_norm"]
    assert by_name["attention"]["library_baselines"] == ["sdpa"]
    assert by_name["kv_quant"]["library_baselines"] == []
    assert {
        "label": "32768x8192 bf16",
        "dims": {"M": 32768, "N": 8192},
        "dtype": "bfloat16",
    } in by_name["softmax"]["gpu_shapes"]
    assert all(o["cpu_shapes"] and o["fence"] and o["starting_candidate"] for o in listing)


def test_ops_table_shows_signatures_and_shapes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for text in (
        "kernel(a, b, scale_a, scale_b)",
        "B4 H32 S2048 D128 bf16",
        "17x2x32",
        "torch._int_mm",
    ):
        assert text in out


def test_ops_describes_a_problem_file_with_its_fence(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["ops", str(PROBLEM)]) == 0
    out = capsys.readouterr().out
    assert "relu_bias_scale" in out and "KernelBench" in out and "ModelNew" in out


def test_ops_unknown_op_or_missing_file_is_a_usage_error(capsys, tmp_path):
    assert main(["ops", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown op 'nope'" in err and "Traceback" not in err and err.count("\n") == 1
    assert main(["ops", str(tmp_path / "missing.py")]) == 2
    assert "problem file not found" in capsys.readouterr().err


def test_ops_broken_problem_file_is_a_usage_error(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    assert main(["ops", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "missing Model, get_init_inputs" in err and "Traceback" not in err
