"""`api`: Claude through the Anthropic Messages API (the anthropic SDK).

The SDK's own retries are off (max_retries=0): this module retries 429 (rate limit), 529
(overloaded), other 5xx, connection errors, timeouts and replies that are not JSON
itself, with bounded exponential backoff plus jitter, honouring retry-after /
retry-after-ms, so every retry is counted and shows in the proposal's meta. A server
that fails SERVER_FAILURE_LIMIT proposals in a row (each after its retries) stops the
run; one that cannot be reached, rejects the key or is not an API at all stops it before
it starts (check_ready asks it once). Tokens come from the reply's usage, also for a
reply rejected after it was paid for; a server that reports none gets its tokens
estimated from the text (said once), so a token budget still binds. Cost from
pricing.py.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import random
import re
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
# one request's limit (--request-timeout): a long reply from a slow model fits; the
# connection itself must open within CONNECT_TIMEOUT_S
DEFAULT_REQUEST_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 10.0
CHECK_TIMEOUT_S = 15.0  # the one request before the run starts
DEFAULT_MAX_RETRIES = 4  # per proposal: ~15-30 s of backoff before it fails
SERVER_FAILURE_LIMIT = 3  # proposals in a row the server failed before the run stops
CHARS_PER_TOKEN = 4  # a usage-less server's tokens, estimated from the text
ANTHROPIC_URL = "https://api.anthropic.com"
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
            from kernelladder.ops.registry import catalog

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
        timeout_s: float | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        failure_limit: int = SERVER_FAILURE_LIMIT,
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
        self.timeout_s = float(timeout_s or DEFAULT_REQUEST_TIMEOUT_S)
        self.max_retries = max_retries
        self.failure_limit = failure_limit
        self._failed_in_row = 0  # proposals in a row the server failed (after retries)
        self._estimated_said = False
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
        """Raises the ProposerError a first proposal would (no key, a server that cannot
        be reached or rejects the key), before a run starts."""
        self._key()
        self.check_server()

    @property
    def base_url(self) -> str:
        return (self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL).rstrip("/")

    def _where(self) -> str:
        return f"the Anthropic API at {self.base_url}"

    # the path check_server asks (GET): cheap, and every server of the kind answers it
    CHECK_PATH = "/v1/models"
    BASE_URL_HINT = "is ANTHROPIC_BASE_URL right?"

    def _timeout(self, seconds: float) -> Any:
        sdk = importlib.import_module(self.SDK)
        return sdk.Timeout(seconds, connect=min(CONNECT_TIMEOUT_S, seconds))

    def _sdk_client(self, name: str, timeout_s: float) -> Any:
        """The SDK's client class `name`, without retries of its own (_retrying retries)."""
        sdk = importlib.import_module(self.SDK)
        return getattr(sdk, name)(
            api_key=self._key(),
            base_url=self.base_url,
            max_retries=0,
            timeout=self._timeout(timeout_s),
        )

    def _sync_client(self, timeout_s: float) -> Any:
        return self._sdk_client(self.SYNC_CLIENT, timeout_s)

    def check_server(self) -> None:
        """One request before the run starts (CHECK_PATH): a server that cannot be
        reached, rejects the key, or is not an API at all (a web page at a wrong base
        URL) raises one fatal line naming it. One that answers with an error status is
        there: its failures are counted as the run goes (SERVER_FAILURE_LIMIT)."""
        sdk = importlib.import_module(self.SDK)
        timeout = min(self.timeout_s, CHECK_TIMEOUT_S)
        client = self._sync_client(timeout)
        try:
            answer = client.get(self.CHECK_PATH, cast_to=object)
        except (sdk.AuthenticationError, sdk.PermissionDeniedError) as exc:
            why = self._refusal(exc.status_code, self._reason(exc))
            raise ProposerError(why, fatal=True) from None
        except sdk.APIStatusError:
            return  # it answers (404: it lists no models here; 429, 5xx: counted later)
        except sdk.APIConnectionError as exc:
            why = _connection_reason(exc, timeout)
            raise ProposerError(f"cannot reach {self._where()}: {why}", fatal=True) from None
        except json.JSONDecodeError as exc:  # says JSON and is not
            raise ProposerError(self._not_json(exc), fatal=True) from None
        finally:
            client.close()
        if isinstance(answer, str):
            raise ProposerError(self._a_page(answer), fatal=True)

    def _a_page(self, text: str) -> str:
        start = " ".join(text.split())[:60]
        return (
            f"{self._where()} answered with a page, not the API's JSON ({start!r}): "
            f"{self.BASE_URL_HINT}"
        )

    def _not_json(self, exc: Exception) -> str:
        return f"{self._where()} sent a reply that is not valid JSON ({_one_line(exc)})"

    def _estimated(self, usage: Any, system: str, user: str, text: str) -> tuple[Any, str | None]:
        """The reply's usage; a server that reported none gets its tokens estimated from
        the text, with the note to say once (a budget must still bind)."""
        if usage is not None:
            return usage, None
        tokens_in = math.ceil((len(system) + len(user)) / CHARS_PER_TOKEN)
        tokens_out = math.ceil(len(text) / CHARS_PER_TOKEN)
        note = (
            f"{self._where()} reports no token usage: tokens are estimated from the text "
            f"({CHARS_PER_TOKEN} characters a token), so --budget-tokens still applies"
        )
        return self._usage_of(tokens_in, tokens_out), note

    def _usage_of(self, tokens_in: int, tokens_out: int) -> Any:
        return {"input_tokens": tokens_in, "output_tokens": tokens_out}

    def _answered(self) -> None:
        """The server gave a reply with text: its failures in a row start again."""
        self._failed_in_row = 0

    def _failed(self, error: ProposerError) -> ProposerError:
        """The server failed this proposal (after its retries, or with no text): the
        error, fatal once it has failed `failure_limit` proposals in a row."""
        self._failed_in_row += 1
        if self._failed_in_row >= self.failure_limit and not error.fatal:
            error.fatal = True
            error.args = (
                f"{error.args[0]}; stopping: {self._failed_in_row} proposals in a row failed",
            )
        return error

    def _key(self) -> str:
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY", "")
        if not key.strip():
            raise ProposerError(NO_KEY_MESSAGE, fatal=True)
        return key.strip()

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = self._sdk_client(self.ASYNC_CLIENT, self.timeout_s)
        return self._client

    async def propose(self, ctx: ProposalContext) -> Proposal:
        self._key()
        client = self._get_client()
        system, user = build_prompt(ctx)
        response, retries = await self._create(client, system, user)
        if isinstance(response, str):  # 200 with a web page: a wrong base URL
            raise ProposerError(self._a_page(response), fatal=True)
        blocks = getattr(response, "content", None) or ()
        text = "".join(
            getattr(block, "text", "") or ""
            for block in blocks
            if getattr(block, "type", "") == "text"
        )
        model = getattr(response, "model", None) or self.model
        usage, note = self._estimated(getattr(response, "usage", None), system, user, text)
        cost = cost_of(model, usage)
        stop = getattr(response, "stop_reason", None)
        meta: dict[str, Any] = {
            "retries": retries,
            "stop_reason": stop,
            "request_id": getattr(response, "_request_id", None) or getattr(response, "id", None),
        }
        empty = f"{self._where()} answered with no text for model {model} (stop_reason {stop})"
        return self._read_reply(ctx, text, model, cost, note, meta, lambda: empty)

    def _read_reply(
        self,
        ctx: ProposalContext,
        text: str,
        model: str,
        cost: Any,
        note: str | None,
        meta: dict[str, Any],
        empty: Callable[[], str],
    ) -> Proposal:
        """The reply's text as a Proposal; a reply with no text (`empty()` says why) or
        none to read a candidate from fails with what its tokens cost all the same."""
        spent = {"tokens_in": cost.tokens_in, "tokens_out": cost.tokens_out, "cost_usd": cost.usd}
        if not text.strip():
            error = ProposerError(empty(), retryable=True)
            raise self._failed(error.spent(**spent, model=model, notice=note))
        self._answered()
        try:
            extracted = extract_reply(text, ctx.op)
        except ProposerError as exc:
            # the tokens were spent all the same: the engine counts them
            raise exc.spent(**spent, model=model, notice=note) from None
        if cost.note:
            meta["cost_note"] = cost.note
        if note:
            meta["tokens_estimated"] = True
        return extracted.proposal(
            ctx,
            model=model,
            tokens_in=cost.tokens_in,
            tokens_out=cost.tokens_out,
            cost_usd=cost.usd,
            meta=meta,
            notice=note,
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
    SYNC_CLIENT, ASYNC_CLIENT = "Anthropic", "AsyncAnthropic"

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
        return f"{self._where()} failed {_times(attempts)}; last: {what}"

    async def _retrying(self, request: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
        """(request()'s answer, the retries it took). A 401, 403 or 404 stops the proposer
        (fatal); another 4xx outside RETRY_STATUSES is one line; 429, 408, 409, 5xx,
        connection errors, timeouts and replies that are not JSON are retried with
        backoff (a server's retry-after honoured) up to max_retries, then one retryable
        line (fatal once the server failed `failure_limit` proposals in a row)."""
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
            except sdk.APITimeoutError as exc:
                error, retry_after = exc, None
                what = f"no answer within {self.timeout_s:g}s (--request-timeout)"
            except sdk.APIConnectionError as exc:
                error, retry_after = exc, None
                what = f"cannot connect: {_connection_reason(exc, self.timeout_s)}"
            except json.JSONDecodeError as exc:  # a reply that says JSON and is not
                error, retry_after = exc, None
                what = f"a reply that is not valid JSON ({_one_line(exc)})"
            if retries >= self.max_retries:
                gave_up = ProposerError(self._gave_up(retries + 1, what), retryable=True)
                raise self._failed(gave_up) from error
            delay = self._delay(retries, retry_after)
            retries += 1
            self.retries += 1
            log.warning("%s: %s; retry %d in %.2fs", self.SDK, what, retries, delay)
            await self._sleep(delay)

    def _delay(self, retries: int, retry_after: float | None) -> float:
        """A server's positive retry-after as it asked (bounded by max_retry_after_s), as
        the SDKs do; else exponential backoff with jitter, bounded. Either way the
        retries are max_retries, so a server asking again at once is asked a few times."""
        if retry_after is not None and retry_after > 0:
            return min(self.max_retry_after_s, retry_after)
        backoff = min(self.max_backoff_s, self.backoff_s * 2.0**retries)
        return backoff * (0.5 + 0.5 * self._random.random())


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _connection_reason(exc: Exception, timeout_s: float) -> str:
    """Why a connection failed, in a person's words: "Connection refused", "no answer
    within 15s", the name that did not resolve."""
    if type(exc).__name__ == "APITimeoutError":
        return f"no answer within {timeout_s:g}s"
    cause = exc.__cause__ or exc.__context__
    text = _one_line(cause) if cause is not None else _one_line(exc)
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text) or "connection error"


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
