"""A stand-in for the Anthropic Messages API on 127.0.0.1, for tests only.

The real API cannot be reached from the build machines (and needs a key), so the tests
point the real anthropic SDK at this server with `base_url`. It speaks just enough of
POST /v1/messages: each request takes the next scripted response (status, headers,
JSON body) in order, and every request is recorded (path, headers, JSON body) so a test
can check what the proposer sent. Standard library only; runs in a daemon thread.
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
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """The user message's text (and the system prompt) as one string."""
        parts = [self.body.get("system") or ""]
        for message in self.body.get("messages") or ():
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            else:
                parts += [c.get("text", "") for c in content or () if isinstance(c, dict)]
        return "\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts)


def message(
    text: str, *, model: str = "claude-sonnet-5-5", tokens_in: int = 1000, tokens_out: int = 500
) -> Scripted:
    """A successful Messages API reply holding `text`."""
    return Scripted(
        200,
        {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        },
        {"request-id": "req_test"},
    )


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Scripted:
    """An API error reply, e.g. error(429, "rate_limit_error", "slow down", {"retry-after": "2"})."""
    return Scripted(
        status, {"type": "error", "error": {"type": kind, "message": text}}, dict(headers or {})
    )


class FakeMessagesServer:
    def __init__(self, responses: list[Scripted] | None = None):
        self.responses: deque[Scripted] = deque(responses or ())
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *responses: Scripted) -> None:
        with self._lock:
            self.responses.extend(responses)

    def __enter__(self) -> FakeMessagesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, recorded: Recorded) -> Scripted:
        with self._lock:
            self.requests.append(recorded)
            if self.responses:
                return self.responses.popleft()
        return error(500, "api_error", "the fake server has no scripted response left")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode(errors="replace")}
                recorded = Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                if self.path.split("?")[0] != "/v1/messages":
                    with server._lock:
                        server.requests.append(recorded)
                    reply = error(404, "not_found_error", f"no route {self.path}")
                else:
                    reply = server._next(recorded)
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
