"""The part the tests' stand-in API servers share (fake_messages_server.py,
fake_openai_server.py): a ThreadingHTTPServer on 127.0.0.1 in a daemon thread, a queue
of scripted replies, every request read as JSON and answered as JSON. A subclass says
what a request gets (`answer`). Standard library only.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Scripted:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as is instead of the JSON body (an HTML page, bad JSON)
    content_type: str = "application/json"
    delay_s: float = 0.0  # wait this long before answering (a slow server)


class ScriptedJsonServer:
    def __init__(self, responses: list[Scripted] | None = None) -> None:
        self.responses: deque[Scripted] = deque(responses or ())
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def address(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *responses: Scripted) -> None:
        with self._lock:
            self.responses.extend(responses)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def answer(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        """What the request gets (it records it, under self._lock, as it sees fit)."""
        raise NotImplementedError

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
                reply = server.answer(method, self.path, headers, body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a request timeout, on purpose)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

        return Handler
