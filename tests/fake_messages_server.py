"""A stand-in for the Anthropic Messages API on 127.0.0.1, for tests only.

The real API cannot be reached from the build machines (and needs a key), so the tests
point the real anthropic SDK at this server with `base_url`. It speaks just enough of
POST /v1/messages: each request takes the next scripted response (status, headers,
JSON body) in order (GET /v1/models, which a proposer asks once before a run, lists one
model), and every request is recorded (path, headers, JSON body) so a test
can check what the proposer sent. Standard library only; runs in a daemon thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from scripted_http import Scripted, ScriptedJsonServer


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
    text: str,
    *,
    model: str = "claude-sonnet-5-5",
    tokens_in: int = 1000,
    tokens_out: int = 500,
    usage: bool = True,
) -> Scripted:
    """A successful Messages API reply holding `text` ("": no content block at all;
    usage=False: no usage, as a stand-in server may send)."""
    body: dict[str, Any] = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }
    if usage:
        body["usage"] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    return Scripted(200, body, {"request-id": "req_test"})


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Scripted:
    """An API error reply, e.g. error(429, "rate_limit_error", "slow down", {"retry-after": "2"})."""
    return Scripted(
        status, {"type": "error", "error": {"type": kind, "message": text}}, dict(headers or {})
    )


class FakeMessagesServer(ScriptedJsonServer):
    def __init__(self, responses: list[Scripted] | None = None, *, default: Scripted | None = None):
        super().__init__(responses)
        self.default = default  # what every request gets once the script is used up

    @property
    def base_url(self) -> str:
        return self.address

    @property
    def messages(self) -> list[Recorded]:
        """The requests for a reply (POST /v1/messages), without the check before a run."""
        return [r for r in self.requests if r.path.split("?")[0] == "/v1/messages"]

    def answer(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        recorded = Recorded(path, headers, body)
        with self._lock:
            self.requests.append(recorded)
            if method == "GET" and path.split("?")[0] == "/v1/models":
                data = [{"id": "claude-sonnet-5-5", "type": "model", "display_name": "Sonnet"}]
                return Scripted(200, {"data": data, "has_more": False})
            if method != "POST" or path.split("?")[0] != "/v1/messages":
                return error(404, "not_found_error", f"no route {path}")
            if self.responses:
                return self.responses.popleft()
            if self.default is not None:
                return self.default
        return error(500, "api_error", "the fake server has no scripted response left")
