"""A kernel inside a real transformers model on the CPU (Triton's interpreter, tiny
configs): where each op goes, that the starting kernels match the model without them,
that a wrong kernel is caught at the module it ran in, and what a model without the op
says. transformers is the deploy extra (dev/test installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from helpers import EXAMPLES  # noqa: E402

from kernelladder.deploy.deployment import DeployRequest, run_deploy  # noqa: E402
from kernelladder.deploy.kernel_source import from_file  # noqa: E402
from kernelladder.deploy.result import exit_code, result_lines  # noqa: E402
from kernelladder.ops.registry import start_path

SMALL = {"batch": 2, "prompt": 12, "new_tokens": 6}


def deploy(kernel: Path | str, op: str, **request) -> dict:
    return run_deploy(from_file(str(kernel), op), DeployRequest(**{**SMALL, **request}))


def wrong_copy(tmp_path: Path, op: str, old: str, new: str) -> Path:
    source = (start_path(op)).read_text()
    assert old in source
    path = tmp_path / f"wrong_{op}.py"
    path.write_text(source.replace(old, new))
    return path


@pytest.mark.parametrize("op", ["rmsnorm", "attention"])
def test_the_starting_kernel_in_a_tiny_llama_matches_the_model_without_it(op):
    result = deploy(start_path(op), op)
    assert result["status"] == "match", "\n".join(result_lines(result))
    assert exit_code(result) == 0
    check = result["check"]
    assert check["calls"]["prefill"] > 0 and check["failure"] is None
    assert (
        check["logits"]["within"] and check["logits"]["max_deviation"] <= check["logits"]["allowed"]
    )
    assert check["logits"]["own_error"] > 0  # the bf16 model against its float32 run
    assert check["tokens"]["equal"] == check["tokens"]["total"] == 2 * SMALL["new_tokens"]
    assert result["model"]["name"] == "llama-3-8b" and result["model"]["tiny"]
    assert result["speed"] is None and "no GPU" in result["speed_note"]
    if op == "rmsnorm":  # every RMSNorm, prefill and decode alike
        assert check["calls"]["sites"] == 5 and check["calls"]["decode"] > 0
        assert any("eps" in n for n in result["placement"]["notes"])
    else:  # causal prefill through the registry; decode steps say they ran SDPA
        assert check["calls"]["sites"] == 2 and check["calls"]["decode"] == 0
        assert check["calls"]["fallbacks"][0]["why"].startswith("decode")
        assert "transformers' attention registry" in result["placement"]["where"]


def test_an_rmsnorm_kernel_that_drops_the_weight_is_caught_at_the_first_norm(tmp_path):
    wrong = wrong_copy(tmp_path, "rmsnorm", "y = (x * inv) * w", "y = x * inv")
    result = deploy(wrong, "rmsnorm")
    assert result["status"] == "mismatch" and exit_code(result) == 1
    failure = result["check"]["failure"]
    assert failure["site"] == "model.layers.0.input_layernorm"
    assert failure["phase"] == "prefill" and failure["call"] == 1
    text = "\n".join(result_lines(result))
    assert "EXPECTED  the model's LlamaRMSNorm:" in text and "SAW       the kernel:" in text
    assert "first at model.layers.0.input_layernorm" in result["summary"]


def test_an_attention_kernel_without_the_causal_mask_is_caught_at_the_first_attention(tmp_path):
    wrong = wrong_copy(
        tmp_path,
        "attention",
        "keep = (offs_m[:, None] >= cols[None, :]) & n_ok[None, :]",
        "keep = n_ok[None, :] & (offs_m[:, None] >= 0)",
    )
    result = deploy(wrong, "attention")
    assert result["status"] == "mismatch"
    assert result["check"]["failure"]["site"] == "model.layers.0.self_attn"
    assert not result["check"]["logits"]["within"]


def test_a_model_without_the_op_says_so():
    result = deploy(start_path("rmsnorm"), "rmsnorm", model="gpt2")
    assert result["status"] == "not-used" and exit_code(result) == 1
    assert result["placement"]["where"] == (
        "not used by this model: no RMSNorm module (it normalizes with LayerNorm)"
    )
    assert result["check"] is None
    softmax = deploy(start_path("softmax"), "softmax")
    assert softmax["status"] == "not-used"
    assert softmax["placement"]["where"].startswith("not used by this model: its attention's")


def test_an_attention_kernel_that_never_runs_in_the_model_is_not_used_with_the_reason():
    result = deploy(start_path("attention"), "attention", dtype="float32")
    assert result["status"] == "not-used"
    assert "the kernel never ran" in result["placement"]["where"]
    assert "float32 (the op takes bf16/fp16)" in result["placement"]["where"]


def test_the_model_eps_kept_shows_the_op_eps_kernel_does_not_match_llama(tmp_path):
    """The op fixes eps at 1e-6, Llama-3 uses 1e-5: aligned by default (and said), kept
    on request, when the check names the first norm."""
    aligned = deploy(start_path("rmsnorm"), "rmsnorm", dtype="float32")
    assert aligned["status"] == "match"
    kept = deploy(start_path("rmsnorm"), "rmsnorm", dtype="float32", keep_model_eps=True)
    assert kept["status"] == "mismatch"
    assert kept["check"]["failure"]["site"] == "model.layers.0.input_layernorm"
    assert "the check compares the kernel with the model's eps" in kept["placement"]["notes"][0]


@pytest.mark.parametrize("op", ["kv_quant", "int8_matmul"])
def test_quantizing_kernels_go_where_the_model_quantizes(op):
    result = deploy(start_path(op), op, batch=1, prompt=8, new_tokens=4)
    assert result["status"] == "match", "\n".join(result_lines(result))
    where = result["placement"]["where"]
    if op == "kv_quant":
        assert where.startswith("the KV cache of 2 layers, stored as int8")
        assert result["check"]["calls"]["sites"] == 4  # keys and values of two layers
    else:
        assert "14 nn.Linear projections of the 2 decoder layers as W8A8" in where
    assert "the unpatched run" in result["placement"]["notes"][0]


def test_int8_matmul_has_no_place_in_a_model_of_conv1d_projections():
    result = deploy(start_path("int8_matmul"), "int8_matmul", model="gpt2")
    assert result["status"] == "not-used"
    assert "no nn.Linear projections (Conv1D instead)" in result["placement"]["where"]


def test_a_workspace_kernel_goes_where_its_deploy_hook_says():
    workspace = EXAMPLES / "tune-layernorm"
    result = deploy(workspace / "kernel.py", str(workspace), model="gpt2")
    assert result["status"] == "match", "\n".join(result_lines(result))
    assert result["check"]["calls"]["sites"] == 5  # ln_1, ln_2 of two blocks and ln_f
    assert result["placement"]["where"].startswith("the forward of every nn.LayerNorm")
    llama = deploy(workspace / "kernel.py", str(workspace))
    assert llama["status"] == "not-used"
    assert "a Llama normalizes with RMSNorm" in llama["placement"]["where"]


def test_a_workspace_without_a_hook_is_not_used_and_says_where_the_hook_goes(tmp_path):
    import shutil

    workspace = tmp_path / "layernorm"
    shutil.copytree(EXAMPLES / "tune-layernorm", workspace)
    (workspace / "deploy.py").unlink()
    result = deploy(workspace / "kernel.py", str(workspace), model="gpt2")
    assert result["status"] == "not-used"
    assert "DIR/deploy.py" in result["placement"]["where"]


def test_a_kernel_that_does_not_load_is_an_error_result(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def kernel(x, weight):\n    return (\n")
    result = deploy(broken, "rmsnorm")
    assert result["status"] == "error" and exit_code(result) == 1
    assert result["error"].startswith("the kernel did not load: syntax error")


def test_a_workspace_run_finds_the_hook_beside_the_workspace_it_was_started_on(tmp_path):
    import json
    import shutil

    from kernelladder.deploy.kernel_source import from_run

    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "h100-own-kernel-run", run)
    workspace = tmp_path / "own-kernel"
    shutil.copytree(EXAMPLES / "own-kernel", workspace)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["op"]["kind"] == "workspace"
    assert from_run(str(run)).hook_path is None  # as recorded: examples/own-kernel, no hook
    (workspace / "deploy.py").write_text("def sites(model):\n    return []\n")
    meta["options"]["op"] = str(workspace)
    (run / "meta.json").write_text(json.dumps(meta))
    kernel = from_run(str(run))
    assert kernel.hook_path == str(workspace / "deploy.py")
    finished = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    best = next(e["best_attempt"] for e in finished if e["kind"] == "run_finished")
    assert (kernel.op, kernel.op_kind, kernel.attempt) == ("own-kernel", "workspace", best)
