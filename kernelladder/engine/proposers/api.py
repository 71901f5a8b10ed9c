"""`api`: Claude through the Anthropic Messages API (the anthropic SDK).

The SDK's own retries are off (max_retries=0): this module retries 429 (rate limit), 529
(overloaded), other 5xx and connection errors itself, with bounded exponential backoff
plus jitter, honouring retry-after / retry-after-ms, so every retry is counted and shows
in the proposal's meta. Tokens come from the reply's usage; cost from pricing.py.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any

from kernelladder.engine.proposers.extract import extract_reply, is_kernelbench
from kernelladder.engine.proposers.pricing import cost_of
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import Proposal, ProposalContext, ProposerBase, ProposerError

log = logging.getLogger(__name__)

NAME = "api"
DEFAULT_MODEL = "claude-sonnet-5-5"  # current Sonnet (Nov 2026): fast, strong at code
DEFAULT_MAX_TOKENS = 16_000
NO_KEY_MESSAGE = "no Anthropic API key: set ANTHROPIC_API_KEY or use --proposer search"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

# Branch labels when the op has no search families (KernelBench problems).
GENERIC_STRATEGIES = (
    "fuse-everything",
    "tile-and-block",
    "memory-layout",
    "persistent",
    "algebraic-rewrite",
)


def strategies_for(op: dict[str, Any], k: int) -> list[str]:
    """Branch labels for a model proposer: the search's family names for a built-in op
    (the prompt explains each), generic lines of attack for a KernelBench problem."""
    labels: list[str] = []
    if not is_kernelbench(op):
        try:
            from kernelladder.engine.proposers.templates import catalog

            labels = [f.name for f in catalog().get(str(op.get("name")), ())]
        except Exception:  # labels are a convenience; fall back to the generic ones
            labels = []
    labels = labels or list(GENERIC_STRATEGIES)
    return [
        labels[i % len(labels)] + ("" if i < len(labels) else f"#{i // len(labels) + 1}")
        for i in range(max(0, k))
    ]


class ApiProposer(ProposerBase):
    name = NAME

    def __init__(
        self,
        *,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout_s: float = 600.0,
        max_retries: int = 6,
        backoff_s: float = 2.0,
        max_backoff_s: float = 60.0,
        max_retry_after_s: float = 300.0,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        seed: int | None = None,
        **_: Any,
    ):
        self.model = model or DEFAULT_MODEL
        self._api_key = api_key
        self._base_url = base_url
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self._sleep = sleep or asyncio.sleep
        self._random = random.Random(seed)
        self._client: Any = None
        self.retries = 0  # over the proposer's life, for a person to see

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        return strategies_for(op, k)

    def check_ready(self) -> None:
        """Raises the ProposerError a first proposal would (no key), before a run starts."""
        self._key()

    def _key(self) -> str:
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY", "")
        if not key.strip():
            raise ProposerError(NO_KEY_MESSAGE, fatal=True)
        return key.strip()

    def _get_client(self) -> Any:
        if self._client is None:
            import anthropic

            base_url = self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            self._client = anthropic.AsyncAnthropic(
                api_key=self._key(), base_url=base_url, max_retries=0, timeout=self.timeout_s
            )
        return self._client

    async def propose(self, ctx: ProposalContext) -> Proposal:
        self._key()
        client = self._get_client()
        system, user = build_prompt(ctx)
        response, retries = await self._create(client, system, user)
        text = "".join(
            getattr(block, "text", "")
            for block in (response.content or ())
            if getattr(block, "type", "") == "text"
        )
        model = getattr(response, "model", None) or self.model
        cost = cost_of(model, getattr(response, "usage", None))
        try:
            extracted = extract_reply(text, ctx.op)
        except ProposerError as exc:
            # the tokens were spent all the same: the engine may count them
            exc.tokens_in, exc.tokens_out, exc.cost_usd = cost.tokens_in, cost.tokens_out, cost.usd
            exc.model = model
            raise
        meta: dict[str, Any] = {
            "retries": retries,
            "stop_reason": getattr(response, "stop_reason", None),
            "request_id": getattr(response, "_request_id", None) or getattr(response, "id", None),
        }
        if cost.note:
            meta["cost_note"] = cost.note
        return extracted.proposal(
            ctx,
            model=model,
            tokens_in=cost.tokens_in,
            tokens_out=cost.tokens_out,
            cost_usd=cost.usd,
            meta=meta,
        )

    async def _create(self, client: Any, system: str, user: str) -> tuple[Any, int]:
        async def request() -> Any:
            return await client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=system,
                messages=[{"role": "user", "content": user}],
            )

        return await self._retrying(request)

    # The SDK whose errors _retrying reads (anthropic and openai name them alike), and how
    # a refusal and a last failure are said; OpenAIChatProposer says them its own way.
    SDK = "anthropic"

    def _reason(self, exc: Exception) -> str:
        return _message(exc)

    def _refusal(self, status: int, reason: str) -> str:
        if status == 401:
            return "the Anthropic API rejected the key (401): check ANTHROPIC_API_KEY"
        if status == 403:
            return f"the Anthropic API refused access (403): {reason}"
        if status == 404:
            return f"the Anthropic API does not know model {self.model} (404): {reason}"
        return f"the Anthropic API said {status}: {reason}"

    def _gave_up(self, attempts: int, what: str) -> str:
        return f"the Anthropic API failed {attempts} times; last: {what}"

    async def _retrying(self, request: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
        """(request()'s answer, the retries it took). A 401, 403 or 404 stops the proposer
        (fatal); another 4xx outside RETRY_STATUSES is one line; 429, 408, 409, 5xx and
        connection errors are retried with backoff (a server's retry-after honoured) up to
        max_retries, then one retryable line."""
        sdk = importlib.import_module(self.SDK)
        retries = 0
        while True:
            try:
                return await request(), retries
            except (sdk.AuthenticationError, sdk.PermissionDeniedError, sdk.NotFoundError) as exc:
                raise ProposerError(
                    self._refusal(exc.status_code, self._reason(exc)), fatal=True
                ) from None
            except sdk.APIStatusError as exc:
                if exc.status_code not in RETRY_STATUSES and exc.status_code < 500:
                    raise ProposerError(self._refusal(exc.status_code, self._reason(exc))) from None
                error: Exception = exc
                retry_after = _retry_after(exc)
                what = f"{exc.status_code} {self._reason(exc)}"
            except sdk.APIConnectionError as exc:  # includes timeouts
                error, retry_after = exc, None
                what = f"{type(exc).__name__}: {self._reason(exc)}"
            if retries >= self.max_retries:
                raise ProposerError(self._gave_up(retries + 1, what), retryable=True) from error
            delay = self._delay(retries, retry_after)
            retries += 1
            self.retries += 1
            log.warning("%s: %s; retry %d in %.2fs", self.SDK, what, retries, delay)
            await self._sleep(delay)

    def _delay(self, retries: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, bounded; a server's retry-after wins if longer."""
        backoff = min(self.max_backoff_s, self.backoff_s * 2.0**retries)
        backoff *= 0.5 + 0.5 * self._random.random()
        if retry_after is not None:
            return min(self.max_retry_after_s, max(retry_after, backoff))
        return backoff


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return " ".join(str(err["message"]).split())[:200]
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None
