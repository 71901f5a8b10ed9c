"""A small reverse proxy on 127.0.0.1, for the web view's tests (a person's nginx or
Caddy stands here; this one is aiohttp, which textual-serve brings).

It forwards every request to one upstream (HTTP and websockets) and behaves as a
proxy's settings would: `rewrite_host` sends the upstream's own address as Host (as
nginx's default `proxy_set_header Host $proxy_host` does), else the browser's Host goes
on; `forwarded_for` adds X-Forwarded-For; `pass_upgrade=False` drops the websocket
upgrade (nginx without `proxy_set_header Upgrade ...`): the request then reaches the
upstream as a plain GET. Every request line it forwarded is recorded (`requests`), as a
proxy's access log would hold it. Runs on an event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any, Self

import aiohttp
from aiohttp import web

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "host", "content-length", "sec-websocket-key", "sec-websocket-version",
    "sec-websocket-extensions", "sec-websocket-accept",
}  # fmt: skip


class ReverseProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        rewrite_host: bool = False,
        forwarded_for: bool = True,
        pass_upgrade: bool = True,
    ) -> None:
        self.upstream = f"127.0.0.1:{upstream_port}"
        self.rewrite_host = rewrite_host
        self.forwarded_for = forwarded_for
        self.pass_upgrade = pass_upgrade
        self.requests: list[str] = []  # "GET /path?query" as forwarded
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _headers(self, request: web.Request) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = self.upstream if self.rewrite_host else request.host
        if self.forwarded_for:
            headers["X-Forwarded-For"] = request.remote or "127.0.0.1"
        return headers

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        url = f"http://{self.upstream}{request.path_qs}"
        headers = self._headers(request)
        is_upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if is_upgrade and self.pass_upgrade:
            return await self._websocket(request, url, headers)
        assert self._session is not None
        async with self._session.request(
            request.method, url, headers=headers, data=await request.read(),
            allow_redirects=False,
        ) as upstream:  # fmt: skip
            body = await upstream.read()
            response = web.Response(status=upstream.status, body=body)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-encoding":
                    response.headers[name] = value
            return response

    async def _websocket(self, request: web.Request, url: str, headers: dict[str, str]) -> Any:
        assert self._session is not None
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        headers.pop("Sec-WebSocket-Protocol", None)
        try:
            upstream = await self._session.ws_connect(
                url.replace("http://", "ws://"), headers=headers,
                protocols=[p for p in offered if p], max_msg_size=0,
            )  # fmt: skip
        except aiohttp.WSServerHandshakeError as exc:
            return web.Response(status=exc.status, text=exc.message)
        client = web.WebSocketResponse(
            protocols=(upstream.protocol,) if upstream.protocol else (), max_msg_size=0
        )
        await client.prepare(request)

        async def pipe(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break
            await sink.close()

        await asyncio.gather(pipe(client, upstream), pipe(upstream, client))
        return client
