"""Headless Chromium driven over the Chrome DevTools Protocol, for the web view's tests.

Debian's `chromium` package (./dev/test installs it) is started with its own profile
directory and a DevTools port; the protocol is spoken over aiohttp's websocket client
(aiohttp comes with textual-serve), so no browser-automation package is needed. What a
page's websockets receive is collected (Network.webSocketFrameReceived): for a
textual-serve page that is the terminal output the app sends, which xterm.js draws on a
canvas, so the text on screen is read from there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

ANSI = re.compile(
    rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]"
)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """One headless browser with one page; `async with Chromium(profile_dir) as browser`."""

    def __init__(
        self,
        profile_dir: Path,
        *,
        width: int = 1600,
        height: int = 1000,
        host_rules: str | None = None,
    ):
        self.profile_dir = profile_dir
        self.size = (width, height)
        # e.g. "MAP evil.test 127.0.0.1": a name resolved as a DNS rebinding would
        self.host_rules = host_rules
        self.process: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.frames: list[bytes] = []  # websocket payloads the page received, in order
        self._session: Any = None
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Chromium:

        path = chromium_path()
        assert path, "chromium is not installed (./dev/test installs it)"
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        (self.profile_dir / "DevToolsActivePort").unlink(missing_ok=True)  # a last run's
        self.process = subprocess.Popen(
            [
                path, "--headless=new", "--no-sandbox",  # as root, Chromium needs no-sandbox
                "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
                "--disable-background-networking", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile_dir}",
                f"--window-size={self.size[0]},{self.size[1]}",
                *([f"--host-resolver-rules={self.host_rules}"] if self.host_rules else []),
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            await self._connect()
        except BaseException:
            await self.__aexit__()  # no browser left behind
            raise
        return self

    async def _connect(self) -> None:
        import aiohttp

        assert self.process is not None
        port_file = self.profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.process.poll() is None, "chromium ended at start"
            assert time.monotonic() < deadline, "chromium opened no DevTools port in 60s"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.send("Network.enable")
        await self.send("Page.enable")

    async def __aexit__(self, *exc: Any) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    async def _read(self) -> None:
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Network.webSocketFrameReceived":
                frame = data["params"]["response"]
                payload = frame.get("payloadData", "")
                if frame.get("opcode") == 2:  # binary: base64 in the protocol
                    self.frames.append(base64.b64decode(payload))
                else:
                    self.frames.append(payload.encode())

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    # --- what a test does ------------------------------------------------------------------
    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    def screen_text(self, since: int = 0) -> str:
        """The terminal output received (from frame `since` on), escape sequences removed."""
        return ANSI.sub(b"", b"".join(self.frames[since:])).decode("utf-8", errors="replace")

    async def wait_for_text(self, text: str, *, since: int = 0, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.screen_text(since):
            if time.monotonic() > deadline:
                tail = self.screen_text(since)[-600:]
                raise AssertionError(f"{text!r} not on the page in {timeout}s; last: {tail!r}")
            await asyncio.sleep(0.2)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def body_text(self) -> str:
        return str(await self.evaluate("document.body ? document.body.innerText : ''") or "")

    async def wait_for_body(self, text: str, *, timeout: float = 60) -> str:
        """The page's own text (not the terminal's) once it holds `text`."""
        deadline = time.monotonic() + timeout
        while True:
            body = await self.body_text()
            if text in body:
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the page in {timeout}s; it says {body!r}")
            await asyncio.sleep(0.2)

    async def cookies(self) -> list[dict[str, Any]]:
        """Every cookie the browser holds, of any site."""
        return list((await self.send("Network.getAllCookies")).get("cookies", []))

    async def press(self, key: str) -> None:
        """One key typed into the terminal (xterm.js listens on its hidden textarea)."""
        await self.send(
            "Runtime.evaluate",
            expression="document.querySelector('.xterm-helper-textarea').focus()",
        )
        code = f"Key{key.upper()}" if key.isalpha() else ""
        common = {"key": key, "code": code, "windowsVirtualKeyCode": ord(key.upper())}
        await self.send("Input.dispatchKeyEvent", type="keyDown", text=key, **common)
        await self.send("Input.dispatchKeyEvent", type="keyUp", **common)

    async def screenshot(self, path: Path) -> Path:
        result = await self.send("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))
        return path
