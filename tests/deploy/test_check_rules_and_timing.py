"""The deploy's rules on their own: when a different greedy token is a near-tie and when
it is a mismatch, the logits' tolerance, the tiny configs, and the timing protocol run on
the CPU with a wall clock (the CLI times only on a GPU: CUDA events)."""

from __future__ import annotations

import time

import pytest
import torch

from kernelladder.deploy.check import LOGITS_TOL, Trace, compare_runs
from kernelladder.deploy.models import DeployError, model_choice, model_names, tiny_config


def trace(steps: list[list[float]]) -> Trace:
    """One row, a 4-token vocabulary; the prefill is the first step's logits."""
    logits = [torch.tensor([s]) for s in steps]
    return Trace(
        prefill=logits[0][:, None, :],
        steps=logits,
        tokens=[row.argmax(-1) for row in logits],
    )


def test_a_swap_of_two_near_equal_logits_within_tolerance_is_a_near_tie():
    ref = trace([[1.0, 0.9, -1.0, -1.0], [2.0, 1.999, 0.0, 0.0]])
    # the second step's two best logits are 0.001 apart; the patched ones swap them by 0.002
    got = trace([[1.0, 0.9, -1.0, -1.0], [2.0, 2.001, 0.0, 0.0]])
    out = compare_runs(ref, got, torch.bfloat16)
    tokens = out["tokens"]
    assert tokens["within"] and tokens["near_tie_count"] == 1
    assert tokens["near_ties"][0]["step"] == 2 and tokens["first_equal_steps"] == 1
    assert out["logits"]["within"]


def test_a_different_token_where_the_logits_are_far_apart_is_a_mismatch():
    ref = trace([[1.0, 0.0, -1.0, -1.0], [3.0, 0.0, 0.0, 0.0]])
    got = trace([[1.0, 0.0, -1.0, -1.0], [0.0, 3.0, 0.0, 0.0]])
    out = compare_runs(ref, got, torch.bfloat16)
    assert not out["tokens"]["within"] and not out["logits"]["within"]
    diff = out["tokens"]["first_difference"]
    assert (diff["step"], diff["expected"], diff["saw"]) == (2, 0, 1)
    assert out["logits"]["worst"]["where"].startswith("generated token 2, row 0")


def test_a_swap_is_not_excused_as_a_near_tie_when_the_logits_are_out_of_tolerance():
    """A wrong kernel moves the logits far: a swap there is a mismatch, whatever the gap."""
    ref = trace([[1.0, 0.0, -1.0, -1.0], [2.0, 1.99, 0.0, 0.0]])
    got = trace([[1.0, 0.0, -1.0, -1.0], [1.0, 2.5, 5.0, 0.0]])
    out = compare_runs(ref, got, torch.bfloat16)
    assert out["tokens"]["near_tie_count"] == 0
    assert out["tokens"]["first_difference"] is not None


def test_the_logits_tolerance_is_stated_per_dtype_against_the_logits_rms():
    ref = trace([[1.0, -1.0, 1.0, -1.0]])  # RMS 1
    nudged = trace([[1.0 + 0.5 * LOGITS_TOL[torch.float32], -1.0, 1.0, -1.0]])
    out = compare_runs(ref, nudged, torch.float32)
    assert out["logits"]["within"] and out["logits"]["allowed"] == pytest.approx(1e-4)
    assert out["logits"]["tolerance"] == "0.0001 x the RMS of the unpatched logits (float32)"
    far = trace([[1.0 + 2 * LOGITS_TOL[torch.float32], -1.0, 1.0, -1.0]])
    assert not compare_runs(ref, far, torch.float32)["logits"]["within"]
    nan = trace([[float("nan"), -1.0, 1.0, -1.0]])
    assert not compare_runs(ref, nan, torch.float32)["logits"]["within"]


def test_a_half_precision_model_may_move_its_logits_by_three_times_its_own_error():
    """bf16 rounding moves a wide model's logits more than a fixed share of their RMS:
    the bound grows to 3x the unpatched model's error against its float32 run."""
    ref = trace([[1.0, -1.0, 1.0, -1.0]])  # RMS 1: the fixed bf16 bound is 0.1
    moved = trace([[1.25, -1.0, 1.0, -1.0]])
    assert not compare_runs(ref, moved, torch.bfloat16)["logits"]["within"]
    logits = compare_runs(ref, moved, torch.bfloat16, own_error=0.09)["logits"]
    assert logits["within"] and logits["allowed"] == pytest.approx(0.27)
    assert (
        "3 x the unpatched model's own error against its float32 run (0.09)" in logits["tolerance"]
    )
    small = compare_runs(ref, moved, torch.bfloat16, own_error=0.01)["logits"]
    assert small["allowed"] == pytest.approx(0.1) and not small["within"]  # the floor stays


def test_every_shipped_config_has_a_tiny_form_that_keeps_its_architecture():
    assert {"llama-3-8b", "qwen3-8b", "qwen2.5-7b", "gpt2"} <= set(model_names())
    llama = tiny_config(model_choice("llama-3-8b").config)
    assert (llama["num_attention_heads"], llama["num_key_value_heads"]) == (4, 1)  # 32:8
    assert llama["hidden_size"] == 64 and llama["rms_norm_eps"] == 1e-5
    assert llama["num_hidden_layers"] == 2 and llama["vocab_size"] == 512
    qwen = tiny_config(model_choice("qwen2.5-7b").config)
    assert (qwen["num_attention_heads"], qwen["num_key_value_heads"]) == (7, 1)  # 28:4
    assert tiny_config(model_choice("qwen3-8b").config)["head_dim"] == 16
    gpt2 = tiny_config(model_choice("gpt2").config)
    assert (gpt2["n_embd"], gpt2["n_head"], gpt2["n_layer"]) == (64, 4, 2)


def test_a_model_is_a_shipped_name_or_a_config_file(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 64}')
    assert model_choice(str(config)).config["model_type"] == "llama"
    with pytest.raises(DeployError, match="unknown model 'llama-9'"):
        model_choice("llama-9")
    config.write_text('{"hidden_size": 64}')
    with pytest.raises(DeployError, match="no model_type"):
        model_choice(str(config))


def test_the_timing_protocol_times_four_variants_in_rotating_rounds():
    """time_variants as on a GPU, with a wall clock and no compiler on the CPU: warm-up,
    rounds in an order that rotates, medians and noise per variant, the patched runs
    against the unpatched ones; decode steps counted as decode."""
    pytest.importorskip("transformers")
    from kernelladder.deploy.calls import KernelCalls
    from kernelladder.deploy.deployment import _prepare_triton
    from kernelladder.deploy.kernel_source import from_file, load_kernel
    from kernelladder.deploy.models import build_model, sized_config, token_ids
    from kernelladder.deploy.placement import place
    from kernelladder.deploy.result import speed_lines
    from kernelladder.deploy.speed import time_variants

    _prepare_triton("cpu")
    kernel = load_kernel(from_file("kernelladder/ops/rmsnorm/start.py", "rmsnorm"), "cpu")
    model = build_model(
        sized_config(model_choice(None), tiny=True, layers=1), dtype=torch.bfloat16,
        device="cpu", seed=0,
    )  # fmt: skip
    calls = KernelCalls()
    placement = place("rmsnorm", kernel.call, model, calls)
    timed: list[bool] = []  # patched or not, per timed call

    def wall(fn):
        timed.append(calls.active)
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1e3, out

    ids = token_ids(1, 6, 512, 0, "cpu")
    speed = time_variants(
        model, ids, 3, calls, make_cache=placement.make_cache, rounds=3, clock=wall,
        compile_model=lambda m: m,
    )  # fmt: skip
    rows = {r["variant"]: r for r in speed["rows"]}
    assert list(rows) == [
        "unpatched eager", "unpatched torch.compile", "patched eager", "patched torch.compile"
    ]  # fmt: skip
    for row in rows.values():
        assert row["measured"] and len(row["prefill_samples_ms"]) == 3
        # batch 1: one token per decode step (the figures are rounded when kept)
        assert row["decode_tok_s"] == pytest.approx(1e3 / row["decode_ms_per_token"], rel=1e-2)
    assert [(c["patched"], c["phase"]) for c in speed["comparisons"]] == [
        ("patched eager", "prefill"), ("patched eager", "decode"),
        ("patched torch.compile", "prefill"), ("patched torch.compile", "decode"),
    ]  # fmt: skip
    assert speed["decode_steps"] == 2 and not calls.active
    assert calls.count("decode") > 0  # the decode loop counted as decode
    # a warm-up of each variant, then 3 rounds of 4, each a prefill and a decode timed
    assert len(timed) == 2 * (4 + 3 * 4) and timed.count(True) == timed.count(False)
    assert "patched eager vs unpatched, decode" in "\n".join(
        speed_lines({"speed": speed, "workload": {"batch": 1, "prompt": 6}})
    )
