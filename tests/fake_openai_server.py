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

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


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
    text: str, *, model: str = "served-model", tokens_in: int = 1000, tokens_out: int = 500
) -> Scripted:
    """A successful chat completion holding `text`, with its usage."""
    return Scripted(
        200,
        {
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
            ],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        },
        {"x-request-id": "req_test"},
    )


def error(status: int, text: str, headers: dict[str, str] | None = None) -> Scripted:
    """An API error, e.g. error(429, "slow down", {"retry-after": "1"})."""
    kind = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
    return Scripted(
        status,
        {"error": {"message": text, "type": "error", "code": kind.get(status)}},
        dict(headers or {}),
    )


class FakeOpenAIServer:
    def __init__(
        self,
        responses: list[Scripted] | None = None,
        *,
        prefix: str = "",
        models: tuple[str, ...] = ("served-model",),
        default: Scripted | None = None,
    ):
        self.prefix = prefix.rstrip("/")
        self.models = models
        self.default = default
        self.responses: deque[Scripted] = deque(responses or ())
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The URL to give as --base-url (the prefix included)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.prefix}"

    @property
    def chats(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def script(self, *responses: Scripted) -> None:
        with self._lock:
            self.responses.extend(responses)

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _reply(self, recorded: Recorded) -> Scripted:
        route = recorded.path.split("?")[0]
        with self._lock:
            self.requests.append(recorded)
            if recorded.method == "GET" and route == f"{self.prefix}/models":
                data = [{"id": m, "object": "model", "owned_by": "test"} for m in self.models]
                return Scripted(200, {"object": "list", "data": data})
            if recorded.method == "POST" and route == f"{self.prefix}/chat/completions":
                if self.responses:
                    return self.responses.popleft()
                if self.default is not None:
                    return self.default
                return error(500, "the fake server has no scripted response left")
        return error(404, f"no route {recorded.method} {recorded.path}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode(errors="replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._reply(Recorded(method, self.path, headers, body))
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

        return Handler
