"""The user's own kernel as a workspace, end to end on the CPU (Triton's interpreter):
attempt #0 is the original, the tune proposer's steps pass or fail for the right reasons,
and every bad workspace gets one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from kernelladder.engine.proposers.tune.knobs import WARPS, find, with_config
from kernelladder.engine.proposers.tune.space import Space
from kernelladder.ops.registry import start_path

REPO = ROOT
EXAMPLE = REPO / "examples" / "own-kernel"

# A whole row per program: BLOCK must cover the row (300 columns), so a step below 512
# breaks correctness; the launch's grid does not use BLOCK.
WHOLE_ROW_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_rows(X, Y, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0)
    total = tl.sum(x * x, axis=0)
    tl.store(Y + row * stride + cols, x / tl.sqrt(total + 1.0), mask=mask)


def kernel(x):
    y = torch.empty_like(x)
    _scale_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=512, num_warps=4)
    return y
"""
WHOLE_ROW_INPUTS = "import torch\n\ndef get_inputs():\n    return [torch.randn(4, 300)]\n"
WHOLE_ROW_REFERENCE = (
    "import torch\n\ndef reference(x):\n"
    "    return x / torch.sqrt((x * x).sum(dim=1, keepdim=True) + 1.0)\n"
)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    env.pop("ANTHROPIC_API_KEY", None)
    code = "import sys; from kernelladder.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


def _workspace(
    root: Path, kernel: str | None, inputs: str | None, reference: str | None = None
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("kernel.py", kernel), ("inputs.py", inputs), ("reference.py", reference)):
        if text is not None:
            (root / name).write_text(text, encoding="utf-8")
    return root


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


# --- tune reads any Triton kernel ---------------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "rmsnorm", "attention", "int8_matmul", "kv_quant"])
def test_tune_finds_launch_parameters_in_each_builtin_start(op):
    source = (start_path(op)).read_text()
    found = find(source)
    # a launch option computed from the inputs is a fact, not a knob, and is said so
    warps = [k for k in found.knobs if k.role == WARPS]
    assert warps or any(".num_warps (not an integer literal)" in s for s in found.skipped)
    space = Space.of(found)
    for knob, values in zip(space.knobs, space.values, strict=True):
        other = next(v for v in values if v != knob.value)
        changed = with_config(source, found.knobs, {knob.key: other})
        assert changed != source
        compile(changed, f"{op}.py", "exec")  # a new value keeps the source valid Python


def test_tune_changes_a_literal_block_in_the_grid_too():
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def k(X, n, BLOCK_N: tl.constexpr):\n    pass\n\n"
        "def kernel(x):\n    k[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK_N=256)\n    return x\n"
    )
    found = find(source)
    changed = with_config(source, found.knobs, {"k.BLOCK_N": 512})
    assert "triton.cdiv(x.numel(), 512)" in changed and "BLOCK_N=512" in changed


def test_tune_changes_a_named_block_where_it_is_bound():
    source = (EXAMPLE / "kernel.py").read_text()
    changed = with_config(source, find(source).knobs, {"_bias_gelu.BLOCK_N": 256})
    assert "BLOCK_N = 256" in changed  # the grid's triton.cdiv(n, BLOCK_N) follows it
    assert "BLOCK_N=BLOCK_N" in changed


# --- end to end ----------------------------------------------------------------------------


def test_own_kernel_example_runs_with_tune_from_the_original(tmp_path):
    run_dir = tmp_path / "own"
    done = _cli(
        "optimize", str(EXAMPLE), "--max-attempts", "4", "--json", "--run-dir", str(run_dir)
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["proposer"] == "tune" and summary["op_kind"] == "workspace"
    assert "the reference is your original kernel (no reference.py)" in done.stderr
    assert "knowledge for the proposers: bias_gelu.md (" in done.stderr
    events = _events(run_dir)
    received = [e for e in events if e["kind"] == "proposal_received"]
    assert received[0]["attempt"] == 0 and received[0]["proposer"] == "start"
    assert (run_dir / "attempts" / "0.py").read_text() == (EXAMPLE / "kernel.py").read_text()
    verdicts = {e["attempt"]: e for e in events if e["kind"] == "verdict_ready"}
    assert verdicts[0]["verdict"] == "pass"
    # the other branches open from attempt #0
    opened = [e for e in events if e["kind"] == "branch_opened"]
    assert [e["from_attempt"] for e in opened] == [None, 0, 0]
    for e in received[1:]:
        assert e["proposer"] == "tune" and e["undo_cost"] == "low"
        assert verdicts[e["attempt"]]["verdict"] == "pass", e["move"]  # interpreter: all valid


def test_steps_fail_for_the_right_reason_against_a_reference(tmp_path):
    ws = _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, WHOLE_ROW_REFERENCE)
    run_dir = tmp_path / "run"
    done = _cli(
        "optimize", str(ws), "--branches", "1", "--max-attempts", "4", "--json",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "no reference.py" not in done.stderr
    verdicts = {e["attempt"]: e for e in _events(run_dir) if e["kind"] == "verdict_ready"}
    assert verdicts[0]["verdict"] == "pass"
    seen_small = False
    for n, v in verdicts.items():
        source = (run_dir / "attempts" / f"{n}.py").read_text()
        block = int(source.split("BLOCK=")[1].split(",")[0])
        if block < 300:  # the row no longer fits: the right reason to fail
            seen_small = True
            assert (v["verdict"], v["gate"]) == ("fail", "correctness"), (n, block)
        else:
            assert v["verdict"] == "pass", (n, block)
    assert seen_small


def test_check_accepts_a_workspace_and_a_candidate(tmp_path):
    done = _cli("check", str(EXAMPLE), str(EXAMPLE / "kernel.py"))
    assert done.returncode == 0, done.stdout + done.stderr


# --- bad input: one line, exit 2 -------------------------------------------------------------


def _bad(tmp_path: Path, ws: Path) -> str:
    done = _cli("optimize", str(ws), "--max-attempts", "1", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "run" / "events.jsonl").exists()
    return lines[0]


def test_no_kernel_py(tmp_path):
    line = _bad(tmp_path, _workspace(tmp_path / "ws", None, WHOLE_ROW_INPUTS))
    assert "no kernel.py" in line


def test_no_inputs(tmp_path):
    line = _bad(tmp_path, _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, None))
    assert "no inputs.py" in line


def test_kernel_that_does_not_match_the_reference(tmp_path):
    wrong = WHOLE_ROW_REFERENCE.replace("+ 1.0)", "+ 1.0) * 2")
    line = _bad(tmp_path, _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, wrong))
    assert "does not match the reference on the first inputs" in line
    assert "output0 off by" in line


def test_a_reference_that_is_not_a_function_of_its_inputs_is_blamed_not_the_kernel(tmp_path):
    """Before: dropout left on in reference.py stopped the run with "kernel.py does not
    match the reference on the first inputs"; the reference now runs twice first."""
    dropout = WHOLE_ROW_REFERENCE.replace(
        "    return x", "    x = torch.nn.functional.dropout(x, 0.5)\n    return x"
    )
    line = _bad(tmp_path, _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, dropout))
    assert "reference.py is not a function of its inputs: run twice on the first inputs" in line
    assert "kernel.py was not checked" in line and "does not match" not in line


def test_reference_that_fails_to_run(tmp_path):
    broken = "def reference(x):\n    raise RuntimeError('reference exploded')\n"
    line = _bad(tmp_path, _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, broken))
    assert "reference.py failed on the first inputs" in line and "reference exploded" in line


# --- the fence of a workspace --------------------------------------------------------------

CALLS_THE_REFERENCE = WHOLE_ROW_KERNEL.replace(
    "    return y\n",
    "    import sys\n"
    "    ref = next(m for n, m in sys.modules.items()\n"
    "               if n.startswith('kernelladder_workspace_reference_'))\n"
    "    return ref.reference(x)\n",
)


def test_a_candidate_calling_the_reference_fails_the_fence(tmp_path):
    ws = _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, WHOLE_ROW_REFERENCE)
    cand = tmp_path / "cheat.py"
    cand.write_text(CALLS_THE_REFERENCE)
    done = _cli("check", str(ws), str(cand), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["gate"] == "fence"
    assert "the reference's reference(...)" in verdict["gates"]["fence"]["detail"]


def test_a_candidate_computing_in_torch_fails_the_fence(tmp_path):
    ws = _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, WHOLE_ROW_REFERENCE)
    cand = tmp_path / "torch.py"
    cand.write_text(
        WHOLE_ROW_REFERENCE.replace("def reference(x)", "import triton\n\ndef kernel(x)")
    )
    done = _cli("check", str(ws), str(cand), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout)["gate"] == "fence"


# --- --start FILE for a built-in op --------------------------------------------------------


def test_start_file_is_attempt_zero_of_a_builtin_op(tmp_path):
    start = tmp_path / "my_rmsnorm.py"
    start.write_text((start_path("rmsnorm")).read_text().replace("1e-6,", "1e-6,  # mine"))
    run_dir = tmp_path / "run"
    done = _cli(
        "optimize", "rmsnorm", "--start", str(start), "--proposer", "tune", "--branches", "1",
        "--max-attempts", "2", "--json", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (run_dir / "attempts" / "0.py").read_text() == start.read_text()
    received = [e for e in _events(run_dir) if e["kind"] == "proposal_received"]
    assert received[0]["move"] == "the start: your kernel (my_rmsnorm.py), unchanged"
    assert received[1]["parent_attempt"] == 0  # the first step starts from it
    assert "no reference.py" not in done.stderr  # a built-in op keeps its own reference


def test_start_file_that_cannot_be_read(tmp_path):
    done = _cli("optimize", "rmsnorm", "--start", str(tmp_path / "missing.py"),
                "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 2
    assert "--start" in done.stderr and "Traceback" not in done.stderr


def test_a_kernel_with_two_outputs(tmp_path):
    two = WHOLE_ROW_KERNEL.replace(
        "    return y\n",
        "    z = torch.empty_like(x)\n"
        "    _scale_rows[(x.shape[0],)](y, z, x.shape[1], x.stride(0), BLOCK=512, num_warps=4)\n"
        "    return y, z\n",
    )
    ws = _workspace(tmp_path / "ws", two, WHOLE_ROW_INPUTS)
    done = _cli("check", str(ws), str(ws / "kernel.py"), "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cand = tmp_path / "one.py"
    cand.write_text(WHOLE_ROW_KERNEL)  # returns one tensor where the original returns two
    done = _cli("check", str(ws), str(cand), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["gate"] == "correctness"


def test_without_reference_py_torch_compile_of_the_kernel_is_no_baseline(tmp_path):
    """torch.compile of the user's own Triton launch is nothing a user could use instead;
    on the H200 it timed 180-680x slower than the kernel and tripped the 10x anti-cheat
    flag on every attempt. With a reference.py it stays the compiled baseline."""
    from kernelladder.ops.registry import get_op
    from kernelladder.ops.workspace import WorkspaceSpec
    from kernelladder.verifier.worker.gates import Verifier

    own = WorkspaceSpec.from_dir(EXAMPLE)
    assert own.reference_kind == "original" and not own.compiled_baseline
    ws = _workspace(tmp_path / "ws", WHOLE_ROW_KERNEL, WHOLE_ROW_INPUTS, WHOLE_ROW_REFERENCE)
    assert WorkspaceSpec.from_dir(ws).compiled_baseline and get_op("rmsnorm").compiled_baseline
    shape = own.cpu_shapes[0]
    inputs = own.make_inputs(shape, 0, "cpu")
    assert "torch.compile" not in Verifier("cpu", str(tmp_path)).baseline_fns(own, shape, inputs)
