"""A tune run on one of the mistuned workspaces, end to end on the CPU (Triton's
interpreter): every attempt is judged by the real verifier and passes, each move names
the knobs it changed, and each proposal says which attempt's source it edited."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from kernelladder.engine.proposers.tune.knobs import find

WORKSPACE = ROOT / "examples" / "tune-softmax"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    env.pop("ANTHROPIC_API_KEY", None)
    code = "import sys; from kernelladder.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=900,
        env=env, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["tune-matmul-fp16", "tune-bias-gelu", "tune-layernorm"])
def test_each_mistuned_start_passes_the_verifier_on_the_cpu(name):
    ws = ROOT / "examples" / name
    done = _cli("check", str(ws), str(ws / "kernel.py"), "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "pass"
    assert verdict["gates"]["correctness"]["status"] == "pass"


def test_a_cpu_tune_run_on_the_softmax_workspace_judges_every_attempt(tmp_path):
    run_dir = tmp_path / "run"
    done = _cli(
        "optimize", str(WORKSPACE), "--proposer", "tune", "--max-attempts", "5", "--json",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["proposer"] == "tune"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    received = [e for e in events if e["kind"] == "proposal_received"]
    verdicts = {e["attempt"]: e for e in events if e["kind"] == "verdict_ready"}
    tuned = [e for e in received if e["proposer"] == "tune"]
    assert len(tuned) == 4  # attempt #0 is the start
    start = {k.key: k.value for k in find((WORKSPACE / "kernel.py").read_text()).knobs}
    configs = set()
    for e in received:
        assert verdicts[e["attempt"]]["verdict"] == "pass", e["move"]  # each one judged
    for e in tuned:
        source = (run_dir / "attempts" / f"{e['attempt']}.py").read_text()
        values = {k.key: k.value for k in find(source).knobs}
        configs.add(tuple(sorted(values.items())))
        changed = [key for key in start if values[key] != start[key]]
        assert changed, e["move"]
        for part in e["move"].split(" (from")[0].split(", "):
            label, _, arrow = part.partition(" ")
            assert f"_softmax.{label}" in start and "→" in arrow, e["move"]
    assert len(configs) == len(tuned)  # no config twice


def test_a_tune_run_has_no_stagnation_stop_unless_asked(monkeypatch):
    """The tuner's branches end when its space is spent or the budget is: the engine's
    stagnation stop (8 attempts without a gain) is off for it by default, as it is the
    default proposer of a workspace without an API key."""
    from kernelladder.cli import build_parser
    from kernelladder.cli.optimize import options_from_args

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    parser = build_parser()
    options = options_from_args(parser.parse_args(["optimize", str(WORKSPACE)]))
    assert options.proposer == "tune" and options.stagnation is None
    asked = parser.parse_args(["optimize", str(WORKSPACE), "--stagnation", "6"])
    assert options_from_args(asked).stagnation == 6
    search = options_from_args(parser.parse_args(["optimize", "rmsnorm"]))
    assert search.proposer == "search" and search.stagnation == 8
