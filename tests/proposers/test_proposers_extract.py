"""Reply extraction, the prompt and the price table of the model proposers."""

from __future__ import annotations

import pytest

from kernelladder.engine.proposers.extract import arg_names, extract_reply
from kernelladder.engine.proposers.pricing import cost_of, price_of
from kernelladder.engine.proposers.prompt import build_prompt, history_text, verdict_text
from kernelladder.engine.protocols import ProposalContext, ProposerError
from kernelladder.ops.registry import get_op

RMS = get_op("rmsnorm").describe()
CODE = "import triton\n\n\ndef kernel(x, weight, eps=1e-6):\n    return x\n"


def test_arg_names_come_from_the_signature():
    assert arg_names(RMS) == ("x", "weight")
    assert arg_names(get_op("int8_matmul").describe()) == ("a", "b", "scale_a", "scale_b")


def test_the_first_python_block_and_the_move_lines_are_taken():
    reply = (
        "Plan first.\n```text\nnot code\n```\n```python\n" + CODE + "```\n"
        "```python\nimport nothing\n```\n**MOVE:** fold the weight load out of the loop\n"
        "UNDO: **medium** - a loop restructure\n"
    )
    got = extract_reply(reply, RMS)
    assert got.source == CODE  # extra defaulted arguments are fine
    assert got.move == "fold the weight load out of the loop"
    assert (got.undo_cost, got.undo_reason) == ("medium", "a loop restructure")


def test_a_kernel_that_needs_extra_arguments_is_refused():
    with pytest.raises(ProposerError, match="op's arguments"):
        extract_reply("```python\nimport triton\ndef kernel(x, weight, eps):\n    pass\n```", RMS)


def test_prompt_for_the_cpu_says_speed_is_not_measured():
    c = ProposalContext(
        op=RMS,
        branch_id="b1",
        strategy="multi-row#2",
        parent_attempt=None,
        parent_source=CODE,
        parent_verdict=None,
        feedback={},
        dead_ends=(),
        hints="",
        best_source="import triton\n# BEST_MARKER\n",
        device="cpu",
    )
    system, user = build_prompt(c)
    assert "Triton" in system
    assert "7x100 fp32" in user and "32768x8192" not in user  # the CPU suite
    assert "speed is not measured" in user
    assert "a [ROWS, N] tile per program" in user  # what the strategy label means
    assert "BEST_MARKER" in user and "DEAD ENDS: none yet" in user


def test_verdict_and_history_text():
    v = {
        "verdict": "pass",
        "gate": None,
        "gates": {},
        "speedup": 7.5,
        "floor_fraction": 0.96,
        "speedup_vs": {"torch.compile": 1.02},
        "timings": [
            {
                "label": "big",
                "candidate_ms": 0.2531,
                "reference_ms": 3.49,
                "floor_fraction": 0.96,
                "baselines_ms": {"F.rms_norm": 0.4},
            }
        ],
    }
    text = verdict_text(v)
    assert (
        "7.500x" in text
        and "vs torch.compile: 1.020x" in text
        and "big: candidate 0.2531 ms" in text
    )
    h = history_text(
        [{"attempt": 4, "move": "ROWS 1->4", "verdict": "fail", "gate": "correctness"}]
    )
    assert h == "  #4: ROWS 1->4 -> fail at correctness"


def test_prices():
    assert price_of("claude-sonnet-5-5") == (2.0, 10.0)
    assert price_of("claude-opus-4-5-20251101") == (5.0, 25.0)  # snapshot suffix
    cost = cost_of(
        "claude-sonnet-5-5",
        {"input_tokens": 1_000_000, "cache_read_input_tokens": 1_000_000, "output_tokens": 100_000},
    )
    assert cost.usd == pytest.approx(2.0 + 0.2 + 1.0) and cost.tokens_in == 2_000_000
    unknown = cost_of("claude-x", {"input_tokens": 5, "output_tokens": 5})
    assert unknown.usd == 0 and "no price known" in unknown.note
