"""A stand-in for an OpenAI-compatible server (OpenAI, vLLM, Ollama...) on 127.0.0.1, for
tests only: the real openai SDK is pointed at it with `base_url`.

It speaks just enough of the API under a path prefix ("" as OpenAI's SDK default base
path would be, "/v1" as vLLM serves it): POST {prefix}/chat/completions takes the next
scripted response (status, headers, JSON body) in order, or repeats `default` once the
script is used up; GET {prefix}/models lists `models`. Every request is recorded (method,
path, headers, JSON body); any other path is a 404. Standard library only; runs in a
daemon thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scripted_http import Scripted, ScriptedJsonServer


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """Every message's text, system first, as one string."""
        return "\n".join(str(m.get("content") or "") for m in self.body.get("messages") or ())


def completion(
    text: str | None,
    *,
    model: str = "served-model",
    tokens_in: int = 1000,
    tokens_out: int = 500,
    usage: bool = True,
    choices: bool = True,
    delay_s: float = 0.0,
) -> Scripted:
    """A successful chat completion holding `text` (None: `content: null`), with its usage
    (usage=False: none, as some servers send; choices=False: an empty `choices` list)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ]
        if choices
        else [],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }
    return Scripted(200, body, {"x-request-id": "req_test"}, delay_s=delay_s)


def html_page() -> Scripted:
    """What a wrong base URL often answers: a web page with status 200."""
    page = b"<!doctype html><html><head><title>Welcome</title></head><body>hi</body></html>"
    return Scripted(200, {}, raw=page, content_type="text/html; charset=utf-8")


def malformed_json() -> Scripted:
    """A reply that says it is JSON and is not (a proxy cut it short, a broken server)."""
    return Scripted(
        200, {}, raw=b'{"id": "chatcmpl-test", "choices": [', content_type="application/json"
    )


def error(status: int, text: str, headers: dict[str, str] | None = None) -> Scripted:
    """An API error, e.g. error(429, "slow down", {"retry-after": "1"})."""
    kind = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
    return Scripted(
        status,
        {"error": {"message": text, "type": "error", "code": kind.get(status)}},
        dict(headers or {}),
    )


class FakeOpenAIServer(ScriptedJsonServer):
    def __init__(
        self,
        responses: list[Scripted] | None = None,
        *,
        prefix: str = "",
        models: tuple[str, ...] = ("served-model",),
        default: Scripted | None = None,
        models_reply: Scripted | None = None,
    ):
        super().__init__(responses)
        self.prefix = prefix.rstrip("/")
        self.models = models
        self.default = default
        self.models_reply = models_reply  # what GET /models gets instead of the list

    @property
    def base_url(self) -> str:
        """The URL to give as --base-url (the prefix included)."""
        return f"{self.address}{self.prefix}"

    @property
    def chats(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def answer(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        route = path.split("?")[0]
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
            if method == "GET" and route == f"{self.prefix}/models":
                if self.models_reply is not None:
                    return self.models_reply
                data = [{"id": m, "object": "model", "owned_by": "test"} for m in self.models]
                return Scripted(200, {"object": "list", "data": data})
            if method == "POST" and route == f"{self.prefix}/chat/completions":
                if self.responses:
                    return self.responses.popleft()
                if self.default is not None:
                    return self.default
                return error(500, "the fake server has no scripted response left")
        return error(404, f"no route {method} {path}")
