"""The `api` proposer with the real anthropic SDK against a local stand-in for the
Messages API (tests/fake_messages_server.py: the real API is out of reach here)."""

from __future__ import annotations

import asyncio

import pytest
from fake_messages_server import FakeMessagesServer, error, message

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.api import DEFAULT_MODEL, NO_KEY_MESSAGE, ApiProposer
from kernelladder.engine.protocols import ProposalContext, ProposerError
from kernelladder.ops.registry import get_op

OP = get_op("rmsnorm").describe()
PARENT = "import triton\n\n\ndef kernel(x, weight):\n    return PARENT_MARKER(x)\n"
GOOD_CODE = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    "def kernel(x, weight):\n    return torch.empty_like(x)\n"
)
GOOD = f"Here it is.\n\n```python\n{GOOD_CODE}```\nMOVE: rows per program 1->4, num_warps 8\nUNDO: low only block sizes changed\n"


def ctx(**over) -> ProposalContext:
    base = dict(
        op=OP,
        branch_id="b1",
        strategy="multi-row",
        parent_attempt=3,
        parent_source=PARENT,
        parent_verdict={
            "verdict": "fail",
            "gate": "correctness",
            "gates": {"correctness": {"status": "fail", "detail": "max error 3.2 at [2, 7]"}},
            "speedup": None,
        },
        feedback={
            "expected": "EXPECTED_MARKER 1.25 at [2, 7]",
            "saw": "SAW_MARKER 4.45 at [2, 7], seed 1",
            "fence": "FENCE_MARKER no torch compute",
            "dead_ends": ["DEAD_END_MARKER rows 8"],
        },
        dead_ends=("DEAD_END_MARKER rows 8",),
        hints="HINT_MARKER try evict_last",
        history=(
            {
                "attempt": 3,
                "move": "HISTORY_MARKER EPT 16->8",
                "verdict": "fail",
                "gate": "correctness",
            },
        ),
        device="cuda",
    )
    base.update(over)
    return ProposalContext(**base)


def sent_key(request) -> str:
    """The key as the SDK sent it (x-api-key, or a bearer token in SDK 2.x)."""
    return request.headers.get("x-api-key") or request.headers.get(
        "authorization", ""
    ).removeprefix("Bearer ")


@pytest.fixture
def server():
    with FakeMessagesServer() as s:
        yield s


def proposer(server: FakeMessagesServer, **cfg) -> tuple[ApiProposer, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # records the backoff instead of waiting
        slept.append(seconds)

    cfg.setdefault("api_key", "sk-test-key")
    return ApiProposer(base_url=server.base_url, sleep=sleep, seed=0, **cfg), slept


def run(p: ApiProposer, c: ProposalContext | None = None):
    return asyncio.run(p.propose(c or ctx()))


def test_a_valid_reply_becomes_a_proposal_with_tokens_and_cost(server):
    server.script(message(GOOD, tokens_in=12_000, tokens_out=3_000))
    p, slept = proposer(server)
    proposal = run(p)
    assert proposal.source == GOOD_CODE
    assert proposal.move == "rows per program 1->4, num_warps 8"
    assert proposal.undo_cost == "low" and proposal.undo_reason == "only block sizes changed"
    assert proposal.model == DEFAULT_MODEL and proposal.strategy == "multi-row"
    assert (proposal.tokens_in, proposal.tokens_out) == (12_000, 3_000)
    assert proposal.cost_usd == pytest.approx((12_000 * 2.0 + 3_000 * 10.0) / 1e6)
    assert proposal.meta["retries"] == 0 and slept == []
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert sent_key(request) == "sk-test-key"
    assert request.body["model"] == DEFAULT_MODEL


def test_the_prompt_carries_parent_feedback_dead_ends_hints_and_history(server):
    server.script(message(GOOD))
    p, _ = proposer(server)
    run(p)
    prompt = server.requests[0].prompt
    for marker in (
        "PARENT_MARKER",
        "EXPECTED_MARKER",
        "SAW_MARKER",
        "FENCE_MARKER",
        "DEAD_END_MARKER",
        "HINT_MARKER",
        "HISTORY_MARKER",
        "max error 3.2",  # the parent's failing gate
        "kernel(x, weight)",
        "32768x8192 bf16",  # the GPU shape suite
        "MOVE:",
        "UNDO:",
    ):
        assert marker in prompt, marker


def test_a_429_with_retry_after_is_retried_then_succeeds(server):
    server.script(error(429, "rate_limit_error", "slow down", {"retry-after": "3"}), message(GOOD))
    p, slept = proposer(server, backoff_s=0.01)
    proposal = run(p)
    assert proposal.source == GOOD_CODE
    assert len(server.requests) == 2
    assert slept and slept[0] >= 3.0  # the server's retry-after wins over the short backoff
    assert proposal.meta["retries"] == 1 and p.retries == 1


def test_overload_and_server_errors_back_off_exponentially(server):
    server.script(
        error(529, "overloaded_error", "overloaded"),
        error(500, "api_error", "boom"),
        error(503, "api_error", "unavailable"),
        message(GOOD),
    )
    p, slept = proposer(server, backoff_s=1.0, max_backoff_s=30.0)
    proposal = run(p)
    assert proposal.meta["retries"] == 3 and len(server.requests) == 4
    # jittered in [0.5, 1] of 1, 2, 4 seconds
    for i, delay in enumerate(slept):
        assert 0.5 * 2**i <= delay <= 2**i


def test_retries_are_bounded_and_end_in_one_retryable_line(server):
    server.script(*[error(500, "api_error", "still broken")] * 5)
    p, slept = proposer(server, max_retries=2, backoff_s=0.01)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.retryable and not info.value.fatal
    assert "failed 3 times" in str(info.value) and "\n" not in str(info.value)
    assert len(server.requests) == 3 and len(slept) == 2


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("I would use more warps.", "no ```python code block"),
        ("```python\ndef kernel(x, weight:\n    pass\n```\nMOVE: x\nUNDO: low y", "does not parse"),
        ("```python\nimport triton\n\ndef other(x, weight):\n    pass\n```", "no function kernel"),
        ("```python\nimport triton\n\ndef kernel(a, b):\n    pass\n```", "op's arguments"),
        ("```python\ndef kernel(x, weight):\n    pass\n```", "does not import triton"),
    ],
)
def test_malformed_replies_are_retryable_errors_that_still_count_tokens(server, reply, words):
    server.script(message(reply, tokens_in=100, tokens_out=50))
    p, _ = proposer(server)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.retryable and not info.value.fatal
    assert words in str(info.value) and "\n" not in str(info.value)
    assert (info.value.tokens_in, info.value.tokens_out) == (100, 50)
    assert info.value.cost_usd > 0


def test_no_key_is_one_fatal_line(server, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    p = ApiProposer(base_url=server.base_url)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.fatal and str(info.value) == NO_KEY_MESSAGE
    assert server.requests == []


def test_a_rejected_key_is_fatal(server):
    server.script(error(401, "authentication_error", "invalid x-api-key"))
    p, _ = proposer(server)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.fatal and "401" in str(info.value)


def test_key_and_base_url_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    server.script(message(GOOD))
    proposal = asyncio.run(get_proposer("api", model="claude-opus-5-5").propose(ctx()))
    assert proposal.source == GOOD_CODE
    assert sent_key(server.requests[0]) == "sk-from-env"
    assert server.requests[0].body["model"] == "claude-opus-5-5"


def test_an_unknown_model_costs_zero_with_a_note(server):
    server.script(message(GOOD, model="claude-from-the-future"))
    p, _ = proposer(server, model="claude-from-the-future")
    proposal = run(p)
    assert proposal.cost_usd == 0.0 and "no price known" in proposal.meta["cost_note"]
    assert proposal.tokens_in == 1000


def test_a_reply_without_undo_line_waits_at_the_gate(server):
    server.script(message(f"```python\n{GOOD_CODE}```\nMOVE: persistent grid\n"))
    p, _ = proposer(server)
    proposal = run(p)
    assert proposal.move == "persistent grid" and proposal.undo_cost == "high"


def test_kernelbench_replies_must_define_modelnew(server):
    kb = {
        "name": "problem.py",
        "kind": "kernelbench",
        "summary": "",
        "signature": "ModelNew(...)",
        "fence": "",
    }
    server.script(
        message("```python\nimport triton\n\ndef kernel(x):\n    pass\n```"),
        message(
            "```python\nimport triton\n\nclass ModelNew:\n    pass\n```\nMOVE: fused\nUNDO: medium new kernel"
        ),
    )
    p, _ = proposer(server)
    with pytest.raises(ProposerError, match="ModelNew"):
        run(p, ctx(op=kb, strategy="fuse-everything"))
    assert run(p, ctx(op=kb, strategy="fuse-everything")).undo_cost == "medium"
    assert p.strategies(kb, 2) == ["fuse-everything", "tile-and-block"]
    assert p.strategies(OP, 2) == ["multi-row", "one-row-per-program"]
