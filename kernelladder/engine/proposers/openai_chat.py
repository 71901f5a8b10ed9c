"""`openai`: any model behind an OpenAI-compatible chat completions server (the official
openai SDK): OpenAI itself, OpenRouter, or an open model served by vLLM, SGLang, Ollama or
LM Studio (`--base-url http://127.0.0.1:8000/v1`).

The prompt, the reply format (one ```python file, MOVE:, UNDO:), the feedback and the
knowledge blocks are the `api` proposer's; so are the backoff, the error wording and the
reading of a reply into a proposal. The key comes from OPENAI_API_KEY; a server at
another base URL may need none. Tokens come from the reply's usage; the cost from
OPENAI_PRICES or --price-in/--price-out (USD per million tokens), else the cost is not
known: counted as 0 with a note, never guessed.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

from kernelladder.engine.proposers.api import ApiProposer, _connection_reason, _times
from kernelladder.engine.proposers.api import _message as _api_message
from kernelladder.engine.proposers.pricing import Cost, tokens
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import Proposal, ProposalContext, ProposerError

NAME = "openai"
OPENAI_URL = "https://api.openai.com/v1"  # the SDK's own default
NO_KEY_MESSAGE = (
    "no OpenAI API key: set OPENAI_API_KEY, or give --base-url of a server that needs none"
)
# a local server that checks no key still gets one: the SDK refuses to send without
NO_KEY_PLACEHOLDER = "not-needed"

# model id (without a -YYYY-MM-DD snapshot suffix) -> (input, output) USD per million
# tokens, from OpenAI's pricing page as read in August 2025; cached input is counted at
# the full input price (an upper bound). Others: --price-in / --price-out.
OPENAI_PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.0, 8.0),
    "o4-mini": (1.10, 4.40),
}
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_of(model: str | None, price_in: float | None, price_out: float | None) -> Any:
    """(input, output) USD per million tokens: the flags when both are given, else the
    table; None when not known."""
    if price_in is not None and price_out is not None:
        return price_in, price_out
    if not model:
        return None
    return OPENAI_PRICES.get(_SNAPSHOT.sub("", model.strip()))


def chat_cost(
    model: str | None, usage: Any, price_in: float | None = None, price_out: float | None = None
) -> Cost:
    """The cost of one chat completion from its usage (prompt_tokens, completion_tokens)."""
    tokens_in = tokens(usage, "prompt_tokens")
    tokens_out = tokens(usage, "completion_tokens")
    price = price_of(model, price_in, price_out)
    if price is None:
        return Cost(
            0.0, tokens_in, tokens_out,
            f"cost not known for model {model} (give --price-in and --price-out, USD per "
            "million tokens): tokens counted, cost counted as 0",
        )  # fmt: skip
    return Cost((tokens_in * price[0] + tokens_out * price[1]) / 1e6, tokens_in, tokens_out)


def _message(exc: Exception) -> str:
    """The server's own words: the openai SDK keeps the body's `error` object as `body`."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("message"):
        return " ".join(str(body["message"]).split())[:200]
    return _api_message(exc)


class OpenAIChatProposer(ApiProposer):
    """ApiProposer's settings, strategies and backoff; the OpenAI chat completions call."""

    name = NAME

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        price_in: float | None = None,
        price_out: float | None = None,
        **cfg: Any,
    ):
        super().__init__(model=model, base_url=base_url, **cfg)
        self.model = model or ""  # none: the server's only model, asked at the first call
        self.price_in = price_in
        self.price_out = price_out

    # --- where and who -------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return (self._base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")

    @property
    def is_openai(self) -> bool:
        return "api.openai.com" in self.base_url

    def _key(self) -> str:
        key = (self._api_key or os.environ.get("OPENAI_API_KEY") or "").strip()
        if key:
            return key
        if self.is_openai:
            raise ProposerError(NO_KEY_MESSAGE, fatal=True)
        return NO_KEY_PLACEHOLDER

    def check_ready(self) -> None:
        """No key for OpenAI itself, or a server that cannot be reached, rejects the key
        or is not an API (check_server): one fatal line before the run starts."""
        self._key()
        if not self.model and self.is_openai:
            raise ProposerError("--proposer openai needs --model NAME (e.g. gpt-5)", fatal=True)
        self.check_server()

    CHECK_PATH = "/models"  # under the base URL
    BASE_URL_HINT = "is --base-url right? (most servers: http://HOST:PORT/v1)"

    def _usage_of(self, tokens_in: int, tokens_out: int) -> Any:
        return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out}

    def _where(self) -> str:
        return f"the server at {self.base_url}"

    # --- one proposal --------------------------------------------------------------------
    async def propose(self, ctx: ProposalContext) -> Proposal:
        client = self._get_client()
        if not self.model:
            self.model = await self._only_model(client)
        system, user = build_prompt(ctx)
        response, retries = await self._create(client, system, user)
        if isinstance(response, str):  # 200 with a web page: a wrong base URL
            raise ProposerError(self._a_page(response), fatal=True)
        choices = getattr(response, "choices", None) or ()
        choice = choices[0] if choices else None
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        model = getattr(response, "model", None) or self.model
        usage, note = self._estimated(getattr(response, "usage", None), system, user, text)
        cost = chat_cost(model, usage, self.price_in, self.price_out)
        meta: dict[str, Any] = {
            "retries": retries,
            "finish_reason": getattr(choice, "finish_reason", None),
            "request_id": getattr(response, "_request_id", None) or getattr(response, "id", None),
            "base_url": self.base_url,
        }
        empty = functools.partial(self._no_text, model, choice, message)
        return self._read_reply(ctx, text, model, cost, note, meta, empty)

    def _no_text(self, model: str, choice: Any, message: Any) -> str:
        """Why a reply has no text to read a candidate from, naming the server."""
        if choice is None:
            return f"{self._where()} answered with no choices (an empty `choices` list) for model {model}"
        refusal = getattr(message, "refusal", None)
        if refusal:
            return f"{self._where()}: model {model} refused: {' '.join(str(refusal).split())[:160]}"
        finish = getattr(choice, "finish_reason", None)
        return (
            f"{self._where()} answered with no text for model {model} (content null, "
            f"finish_reason {finish})"
        )

    async def _only_model(self, client: Any) -> str:
        """No --model: the server's model when it serves exactly one (vLLM serves one)."""
        try:
            names = await _model_names(client)
        except Exception as exc:
            raise ProposerError(
                f"--proposer openai: no --model given and {self._where()} did not list its "
                f"models ({_message(exc)})",
                fatal=True,
            ) from None
        if len(names) != 1:
            listed = ", ".join(names[:12]) or "none"
            raise ProposerError(
                f"--proposer openai needs --model NAME: {self._where()} serves {listed}",
                fatal=True,
            )
        return names[0]

    async def _create(self, client: Any, system: str, user: str) -> tuple[Any, int]:
        # OpenAI's newer models take max_completion_tokens only; most local servers
        # (vLLM, Ollama, LM Studio) know max_tokens best
        limit = "max_completion_tokens" if self.is_openai else "max_tokens"

        async def request() -> Any:
            return await client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                **{limit: self.max_tokens},
            )

        return await self._retrying(request)

    SDK = "openai"
    SYNC_CLIENT, ASYNC_CLIENT = "OpenAI", "AsyncOpenAI"

    def _reason(self, exc: Exception) -> str:
        return _message(exc)

    def _refusal(self, status: int, reason: str) -> str:
        where, model = self._where(), self.model or "(the server's)"
        if status == 401:
            return (
                f"{where} rejected the key (401) for model {model}: check OPENAI_API_KEY ({reason})"
            )
        if status == 403:
            return f"{where} refused access (403) to model {model}: {reason}"
        if status == 404:
            return (
                f"{where} answered 404 for model {model}: the model is not served there, or "
                f"the base URL lacks its path (e.g. /v1) ({reason})"
            )
        return f"{where} said {status} for model {model}: {reason}"

    def _gave_up(self, attempts: int, what: str) -> str:
        return f"{self._where()} failed {_times(attempts)} for model {self.model}; last: {what}"


class NotAnApi(ValueError):
    """The server answered GET /models with a web page (the text), not the API's JSON."""


async def _model_names(client: Any) -> list[str]:
    """The ids GET /models lists (read as plain JSON: a web page or another shape is
    said as such, where the SDK's page type would fail on it)."""
    answer = await client.get("/models", cast_to=object)
    if isinstance(answer, str):
        raise NotAnApi(answer)
    data = answer.get("data") if isinstance(answer, dict) else None
    return sorted(str(m["id"]) for m in data or () if isinstance(m, dict) and m.get("id"))


async def list_models(
    base_url: str | None, api_key: str | None = None, timeout_s: float = 10.0
) -> tuple[str, list[str]]:
    """(the base URL asked, the ids of the models it serves); `doctor` shows them.
    Raises ProposerError with one line when the server cannot be asked."""
    import openai

    proposer = OpenAIChatProposer(base_url=base_url, api_key=api_key, timeout_s=timeout_s)
    client = proposer._get_client()
    try:
        return proposer.base_url, await _model_names(client)
    except openai.AuthenticationError as exc:
        raise ProposerError(
            f"{proposer._where()} rejected the key (401): check OPENAI_API_KEY ({_message(exc)})"
        ) from None
    except openai.APIStatusError as exc:
        raise ProposerError(
            f"{proposer._where()} said {exc.status_code} to GET /models: {_message(exc)}"
        ) from None
    except openai.APIConnectionError as exc:
        why = _connection_reason(exc, timeout_s)
        raise ProposerError(f"cannot reach {proposer._where()}: {why}") from None
    except NotAnApi as exc:
        raise ProposerError(proposer._a_page(str(exc))) from None
    except json.JSONDecodeError as exc:
        raise ProposerError(proposer._not_json(exc)) from None
    finally:
        await client.close()
