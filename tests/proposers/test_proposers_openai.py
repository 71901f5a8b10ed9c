"""The `openai` proposer with the real openai SDK against a local OpenAI-compatible server
(tests/fake_openai_server.py): the prompt it shares with `api`, usage and cost, retries on
429/5xx, a clear stop on 401/404, the server's only model when none is named, and
`doctor --proposer openai` listing the server's models."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from fake_openai_server import FakeOpenAIServer, completion, error

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.openai_chat import (
    NO_KEY_MESSAGE,
    OpenAIChatProposer,
    chat_cost,
    list_models,
)
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import ProposalContext, ProposerError
from kernelladder.ops.registry import get_op

OP = get_op("rmsnorm").describe()
PARENT = "import triton\n\n\ndef kernel(x, weight):\n    return PARENT_MARKER(x)\n"
GOOD_CODE = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    "def kernel(x, weight):\n    return torch.empty_like(x)\n"
)
GOOD = f"```python\n{GOOD_CODE}```\nMOVE: rows per program 1->4\nUNDO: low only block sizes\n"


def ctx(**over) -> ProposalContext:
    base = dict(
        op=OP,
        branch_id="b1",
        strategy="multi-row",
        parent_attempt=3,
        parent_source=PARENT,
        parent_verdict={"verdict": "fail", "gate": "correctness", "speedup": None},
        feedback={
            "expected": "EXPECTED_MARKER 1.25",
            "saw": "SAW_MARKER 4.45",
            "fence": "FENCE_MARKER no torch compute",
            "dead_ends": ["DEAD_END_MARKER rows 8"],
        },
        dead_ends=("DEAD_END_MARKER rows 8",),
        hints="HINT_MARKER try evict_last",
        device="cuda",
    )
    base.update(over)
    return ProposalContext(**base)


@pytest.fixture(params=["", "/v1"], ids=["root", "v1"])
def server(request):
    with FakeOpenAIServer(prefix=request.param) as s:
        yield s


def proposer(server: FakeOpenAIServer, **cfg) -> tuple[OpenAIChatProposer, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # records the backoff instead of waiting
        slept.append(seconds)

    cfg.setdefault("model", "served-model")
    p = get_proposer("openai", base_url=server.base_url, sleep=sleep, seed=0, **cfg)
    assert isinstance(p, OpenAIChatProposer)
    return p, slept


def run(p: OpenAIChatProposer, c: ProposalContext | None = None):
    return asyncio.run(p.propose(c or ctx()))


def test_a_reply_becomes_a_proposal_with_tokens_cost_and_its_parent(server):
    server.script(completion(GOOD, model="gpt-4.1", tokens_in=12_000, tokens_out=3_000))
    p, slept = proposer(server, model="gpt-4.1")
    proposal = run(p)
    assert proposal.source == GOOD_CODE and proposal.move == "rows per program 1->4"
    assert proposal.undo_cost == "low" and proposal.model == "gpt-4.1"
    assert (proposal.tokens_in, proposal.tokens_out) == (12_000, 3_000)
    assert proposal.cost_usd == pytest.approx((12_000 * 2.0 + 3_000 * 8.0) / 1e6)
    assert proposal.base_attempt == 3  # made from the parent it was shown
    assert proposal.meta["retries"] == 0 and slept == [] and "cost_note" not in proposal.meta
    (request,) = server.requests
    assert request.path == f"{server.prefix}/chat/completions"
    assert request.body["model"] == "gpt-4.1" and request.body["max_tokens"] == 16_000


def test_the_prompt_is_the_api_proposers_prompt(server):
    server.script(completion(GOOD))
    p, _ = proposer(server)
    run(p)
    system, user = build_prompt(ctx())
    messages = server.requests[0].body["messages"]
    assert messages == [{"role": "system", "content": system}, {"role": "user", "content": user}]
    for marker in ("PARENT_MARKER", "SAW_MARKER", "FENCE_MARKER", "DEAD_END_MARKER", "HINT_"):
        assert marker in user


def test_given_prices_price_every_call_and_no_price_says_cost_not_known(server):
    server.script(completion(GOOD, tokens_in=2_000_000, tokens_out=1_000_000), completion(GOOD))
    p, _ = proposer(server, price_in=0.5, price_out=1.5)
    assert run(p).cost_usd == pytest.approx(0.5 * 2 + 1.5)
    p, _ = proposer(server)
    unpriced = run(p)
    assert unpriced.cost_usd == 0.0 and (unpriced.tokens_in, unpriced.tokens_out) == (1000, 500)
    assert "cost not known for model served-model" in unpriced.meta["cost_note"]
    assert not chat_cost("served-model", {"prompt_tokens": 1}).known


def test_429_then_200_is_retried_with_backoff_honouring_retry_after(server):
    server.script(error(429, "slow down", {"retry-after": "3"}), error(503, "busy"))
    server.script(completion(GOOD))
    p, slept = proposer(server)
    proposal = run(p)
    assert proposal.meta["retries"] == 2 and len(server.requests) == 3
    assert slept[0] >= 3.0 and 0 < slept[1] <= 4.0


def test_retries_are_bounded_and_end_in_one_retryable_line(server):
    server.script(*[error(500, "down")] * 3)
    p, slept = proposer(server, max_retries=2)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.retryable and not info.value.fatal and len(slept) == 2
    assert "failed 3 times for model served-model" in str(info.value)


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "rejected the key (401) for model served-model"), (404, "answered 404 for model")],
)
def test_401_and_404_stop_naming_the_server_and_the_model(server, status, words):
    server.script(error(status, "nope"))
    p, slept = proposer(server)
    with pytest.raises(ProposerError) as info:
        run(p)
    assert info.value.fatal and slept == [] and len(server.requests) == 1
    assert words in str(info.value) and server.base_url in str(info.value)


def test_without_a_model_the_servers_only_model_is_used(server):
    server.script(completion(GOOD))
    p, _ = proposer(server, model=None)
    assert run(p).model == "served-model"
    assert [r.method for r in server.requests] == ["GET", "POST"]
    assert server.requests[1].body["model"] == "served-model"


def test_without_a_model_a_server_of_several_models_names_them():
    with FakeOpenAIServer(models=("a-model", "b-model")) as s:
        p, _ = proposer(s, model=None)
        with pytest.raises(ProposerError, match="needs --model NAME.*serves a-model, b-model"):
            run(p)


def test_openai_itself_needs_a_key_a_local_server_does_not(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ProposerError, match=NO_KEY_MESSAGE):
        get_proposer("openai", model="gpt-5").check_ready()
    server.script(completion(GOOD))
    p, _ = proposer(server)
    p.check_ready()  # asks the server once (GET /models), with the same key
    run(p)
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer not-needed"] * 2
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.script(completion(GOOD))
    p, _ = proposer(server)
    run(p)
    assert server.chats[1].headers["authorization"] == "Bearer sk-from-env"


def test_list_models_and_doctor_list_the_servers_models(server):
    url, names = asyncio.run(list_models(server.base_url))
    assert url == server.base_url and names == ["served-model"]
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--json", "--proposer", "openai",
         "--base-url", server.base_url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["openai server"]["status"] == "ok"
    assert "served-model" in checks["openai server"]["detail"]
    assert server.base_url in checks["openai server"]["detail"]


def test_doctor_says_when_the_server_cannot_be_reached():
    with FakeOpenAIServer() as s:
        url = s.base_url
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder", "doctor", "--json", "--proposer", "openai",
         "--base-url", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["openai server"]["status"] == "FAIL" and out.returncode == 1
    assert "cannot reach the server at" in checks["openai server"]["detail"]
