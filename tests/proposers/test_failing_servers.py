"""The model proposers against servers that fail: the real openai and anthropic SDKs
against local stand-ins (tests/fake_openai_server.py, fake_messages_server.py) that are
down, reject the key, rate-limit or fail forever, answer a web page, no choices, no text,
broken JSON, no usage, or too slowly. Each case ends in one line naming the server; the
tokens a rejected reply cost are carried to the engine; a server that keeps failing
stops the run (fatal), one that cannot be asked stops it before it starts."""

from __future__ import annotations

import asyncio
import socket

import pytest
from fake_messages_server import FakeMessagesServer, message
from fake_messages_server import error as messages_error
from fake_openai_server import FakeOpenAIServer, completion, error, html_page, malformed_json

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.api import (
    CHARS_PER_TOKEN,
    DEFAULT_REQUEST_TIMEOUT_S,
    SERVER_FAILURE_LIMIT,
    ApiProposer,
)
from kernelladder.engine.proposers.openai_chat import OpenAIChatProposer
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import ProposalContext, ProposerError
from kernelladder.ops.registry import get_op

OP = get_op("rmsnorm").describe()
GOOD_CODE = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    "def kernel(x, weight):\n    return torch.empty_like(x)\n"
)
GOOD = f"```python\n{GOOD_CODE}```\nMOVE: rows per program 1->4\nUNDO: low only block sizes\n"


def ctx() -> ProposalContext:
    return ProposalContext(
        op=OP, branch_id="b1", strategy="multi-row", parent_attempt=None,
        parent_source="import triton\n\n\ndef kernel(x, weight):\n    return x\n",
        parent_verdict=None, feedback={}, dead_ends=(), hints="", device="cuda",
    )  # fmt: skip


def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openai_proposer(base_url: str, **cfg) -> tuple[OpenAIChatProposer, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # records the backoff instead of waiting
        slept.append(seconds)

    cfg.setdefault("model", "served-model")
    p = get_proposer("openai", base_url=base_url, sleep=sleep, seed=0, **cfg)
    assert isinstance(p, OpenAIChatProposer)
    return p, slept


def propose(p) -> object:
    return asyncio.run(p.propose(ctx()))


def failure(p) -> ProposerError:
    with pytest.raises(ProposerError) as info:
        propose(p)
    assert "\n" not in str(info.value)
    return info.value


# --- before the run: the server is asked once ------------------------------------------


def test_a_server_that_is_down_stops_the_run_before_it_starts_naming_the_url():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    p, _ = openai_proposer(url)
    with pytest.raises(ProposerError) as info:
        p.check_ready()
    assert info.value.fatal
    assert str(info.value) == f"cannot reach the server at {url}: Connection refused"
    # one that answers with an error status is there: its failures count as the run goes
    with FakeOpenAIServer(prefix="/v1", models_reply=error(503, "warming up")) as s:
        openai_proposer(s.base_url)[0].check_ready()
    with FakeOpenAIServer(prefix="/v1", models_reply=error(404, "no such route")) as s:
        openai_proposer(s.base_url)[0].check_ready()  # a server that lists no models


def test_a_rejected_key_or_a_web_page_stops_the_run_before_it_starts():
    with FakeOpenAIServer(prefix="/v1", models_reply=error(401, "Incorrect API key")) as s:
        p, _ = openai_proposer(s.base_url)
        with pytest.raises(ProposerError, match="rejected the key \\(401\\)") as info:
            p.check_ready()
        assert info.value.fatal and s.base_url in str(info.value) and s.chats == []
    with FakeOpenAIServer(models_reply=html_page()) as s:  # a web server, not an API
        p, _ = openai_proposer(s.base_url)
        with pytest.raises(ProposerError) as info:
            p.check_ready()
        assert info.value.fatal and str(info.value) == (
            f"the server at {s.base_url} answered with a page, not the API's JSON "
            "('<!doctype html><html><head><title>Welcome</title></head><bod'): is "
            "--base-url right? (most servers: http://HOST:PORT/v1)"
        )


def test_doctor_says_a_web_page_is_not_an_api():
    from kernelladder.engine.proposers.openai_chat import list_models

    page = pytest.raises(ProposerError, match="answered with a page, not the API's JSON")
    with FakeOpenAIServer(models_reply=html_page()) as s, page:
        asyncio.run(list_models(s.base_url))
    broken = pytest.raises(ProposerError, match="a reply that is not valid JSON")
    with FakeOpenAIServer(prefix="/v1", models_reply=malformed_json()) as s, broken:
        asyncio.run(list_models(s.base_url))


def test_the_anthropic_api_is_asked_once_before_the_run_too():
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ProposerError, match=f"cannot reach the Anthropic API at {url}: Conn"):
        ApiProposer(api_key="sk-test", base_url=url).check_ready()
    with FakeMessagesServer() as s:
        ApiProposer(api_key="sk-test", base_url=s.base_url).check_ready()
        assert [r.path for r in s.requests] == ["/v1/models"]


# --- during the run ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (error(429, "rate limited", {"retry-after": "2"}), "last: 429 rate limited"),
        (error(500, "internal error"), "last: 500 internal error"),
        (malformed_json(), "last: a reply that is not valid JSON (Expecting value"),
    ],
    ids=["429-forever", "500-forever", "malformed-json"],
)
def test_a_server_that_fails_forever_stops_the_run_after_proposals_in_a_row(reply, words):
    with FakeOpenAIServer(prefix="/v1", default=reply) as s:
        p, slept = openai_proposer(s.base_url, max_retries=2)
        for n in range(1, SERVER_FAILURE_LIMIT + 1):
            e = failure(p)
            assert words in str(e) and s.base_url in str(e) and "failed 3 times" in str(e)
            assert e.fatal == (n == SERVER_FAILURE_LIMIT)  # the last one stops the run
        assert str(e).endswith(f"; stopping: {SERVER_FAILURE_LIMIT} proposals in a row failed")
        assert len(s.chats) == 3 * SERVER_FAILURE_LIMIT and len(slept) == 2 * SERVER_FAILURE_LIMIT
        if "429" in words:
            assert set(slept) == {2.0}  # the server's retry-after, as it asked


def test_a_reply_between_failures_starts_the_count_again():
    with FakeOpenAIServer(prefix="/v1") as s:
        p, _ = openai_proposer(s.base_url, max_retries=0)
        s.script(error(500, "x"), error(500, "x"), completion(GOOD))
        assert not failure(p).fatal and not failure(p).fatal
        propose(p)
        s.default = error(500, "x")
        assert [failure(p).fatal for _ in range(3)] == [False, False, True]  # from one again


def test_an_html_page_with_status_200_says_the_base_url_is_wrong():
    with FakeOpenAIServer(default=html_page()) as s:
        e = failure(openai_proposer(s.base_url)[0])
    assert e.fatal and "answered with a page, not the API's JSON" in str(e)
    assert "is --base-url right?" in str(e) and "code block" not in str(e)


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (completion(GOOD, choices=False, tokens_in=3000, tokens_out=700), "answered with no "
         "choices (an empty `choices` list) for model served-model"),
        (completion(None, tokens_in=3000, tokens_out=700), "answered with no text for model "
         "served-model (content null, finish_reason stop)"),
    ],
    ids=["empty-choices", "content-null"],
)  # fmt: skip
def test_a_reply_without_text_says_so_and_its_tokens_are_counted(reply, words):
    with FakeOpenAIServer(prefix="/v1", default=reply) as s:
        e = failure(openai_proposer(s.base_url, price_in=1.0, price_out=2.0)[0])
    assert str(e) == f"the server at {s.base_url} {words}" and e.retryable
    assert (e.tokens_in, e.tokens_out, e.model) == (3000, 700, "served-model")
    assert e.cost_usd == pytest.approx((3000 * 1.0 + 700 * 2.0) / 1e6)


def test_a_reply_without_usage_is_estimated_and_said_so():
    with FakeOpenAIServer(prefix="/v1", default=completion(GOOD, usage=False)) as s:
        p, _ = openai_proposer(s.base_url)
        proposal = propose(p)
        rejected = completion("I would not change anything.", usage=False)
        s.default = rejected
        e = failure(p)
    system, user = build_prompt(ctx())
    assert proposal.tokens_in == -(-(len(system) + len(user)) // CHARS_PER_TOKEN) > 0
    assert proposal.tokens_out == -(-len(GOOD) // CHARS_PER_TOKEN)
    assert proposal.meta["tokens_estimated"] is True
    assert proposal.notice == (
        f"the server at {s.base_url} reports no token usage: tokens are estimated from the "
        "text (4 characters a token), so --budget-tokens still applies"
    )
    assert e.tokens_in == proposal.tokens_in and e.tokens_out > 0 and e.notice == proposal.notice


def test_a_slow_server_times_out_after_the_request_timeout():
    assert DEFAULT_REQUEST_TIMEOUT_S == 300.0  # not the SDKs' 600 s
    slow = completion(GOOD, delay_s=3.0)
    with FakeOpenAIServer(prefix="/v1", default=slow) as s:
        p, slept = openai_proposer(s.base_url, timeout_s=0.5, max_retries=1)
        e = failure(p)
    assert str(e) == (
        f"the server at {s.base_url} failed 2 times for model served-model; last: no answer "
        "within 0.5s (--request-timeout)"
    )
    assert len(slept) == 1 and e.retryable


def test_the_anthropic_api_the_same_way(tmp_path):
    with FakeMessagesServer(default=message("", tokens_in=3000, tokens_out=700)) as s:
        p = ApiProposer(api_key="sk-test", base_url=s.base_url)
        e = failure(p)
        assert str(e) == (
            f"the Anthropic API at {s.base_url} answered with no text for model "
            "claude-sonnet-5-5 (stop_reason end_turn)"
        )
        assert (e.tokens_in, e.tokens_out) == (3000, 700) and e.cost_usd > 0
        s.default = message("No code here.", usage=False)
        e = failure(p)
        assert "no ```python code block" in str(e) and e.tokens_in > 0 and e.notice
        s.default = messages_error(500, "api_error", "boom")
        p = ApiProposer(api_key="sk-test", base_url=s.base_url, max_retries=0, backoff_s=0.001)
        errors = [failure(p) for _ in range(SERVER_FAILURE_LIMIT)]
        assert [x.fatal for x in errors] == [False] * (SERVER_FAILURE_LIMIT - 1) + [True]
        assert f"the Anthropic API at {s.base_url} failed once; last: 500 boom" in str(errors[0])
