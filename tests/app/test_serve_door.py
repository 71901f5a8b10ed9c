"""Who may steer a run through `kernelladder serve`, tried as an attacker and a proxy
would: real server processes, a live CPU run started in the background, headless
Chromium (tests/headless_chromium.py) that resolves evil.test and proxy.test to
127.0.0.1 (a DNS rebinding, a proxy's public name), and a small reverse proxy in front
(tests/reverse_proxy.py, standing where a person's nginx would). One run, one browser
and one set of servers serve the whole module.

- A rebound DNS name reaches a loopback server: refused, the page and its websocket.
- Behind a proxy (--public-url) the token is required; the page keeps it itself: no
  cookie, so a server on another port of the host never receives it, and no log (the
  server's, the proxy's) holds it.
- A proxy that rewrites Host, or drops the websocket upgrade (nginx's defaults): the
  page says why and what to set. A forwarded request to a loopback server needs the
  token.
- A page of a run that is not running says why and replays it.
- The terminal stays quiet: no line per page, none on Ctrl-C but the last.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import pytest_asyncio
from headless_chromium import Chromium, chromium_path
from helpers import EXAMPLES, Served, free_port, http_status, stop_owner, websocket_status
from reverse_proxy import ReverseProxy

from kernelladder.app.attach import start_detached
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_log

pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(chromium_path() is None, reason="needs chromium (./dev/test installs it)"),
    pytest.mark.skipif(shutil.which("sh") is None, reason="textual-serve starts apps via sh"),
]

RULES = "MAP evil.test 127.0.0.1, MAP proxy.test 127.0.0.1"


class Recorder:
    """Another service on this host, on another port: records every request's headers."""

    def __init__(self) -> None:
        self.headers: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                recorder.headers.append(f"{self.requestline}\n{self.headers}")
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.end_headers()
                self.wfile.write(b"another service")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class Site:
    """The module's run, servers and proxies (started once; `close` stops whatever of
    them started, also after a start that failed half way)."""

    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.servers: list[Served] = []
        self.proxies: list[ReverseProxy] = []
        self.recorder = Recorder()

    def serve(self, *args: str, name: str) -> Served:
        served = Served(str(self.run_dir), *args, log=self.tmp / f"{name}.log")
        self.servers.append(served)
        return served

    def proxy(self, upstream_port: int, **settings) -> ReverseProxy:
        proxy = ReverseProxy(upstream_port, **settings).__enter__()
        self.proxies.append(proxy)
        return proxy

    def start(self) -> None:
        start_detached(
            ["rmsnorm", "--device", "cpu", "--max-attempts", "400", "--branches", "2",
             "--no-confirm", "--stagnation", "400"],
            self.run_dir,
            new_run=True,
        )  # fmt: skip
        # a loopback server, no token: this machine's own browser steers
        self.loopback_port = free_port()
        self.loopback = self.serve("--port", str(self.loopback_port), name="loopback")
        # a proxy as docs/WEB.md sets it (Host and upgrade passed), a public URL given
        self.public_proxy = self.proxy(free_port(), forwarded_for=True)
        self.public_url = f"http://proxy.test:{self.public_proxy.port}/"
        upstream = self.public_proxy.upstream.split(":")[1]
        self.public = self.serve("--port", upstream, "--public-url", self.public_url, name="public")
        # nginx's defaults in front of the loopback server: Host rewritten to upstream's
        self.rewriting = self.proxy(self.loopback_port, rewrite_host=True, forwarded_for=False)
        # a proxy that drops the websocket upgrade, its public URL given
        self.no_upgrade = self.proxy(free_port(), pass_upgrade=False)
        upstream = self.no_upgrade.upstream.split(":")[1]
        plain_url = f"http://proxy.test:{self.no_upgrade.port}/"
        self.plain = self.serve("--port", upstream, "--public-url", plain_url, name="plain")
        self.loopback.url()
        self.printed = self.public.url()
        self.token = self.printed.split("#token=", 1)[1]
        self.plain_url = self.plain.url()

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        for proxy in self.proxies:
            proxy.__exit__(None, None, None)
        self.recorder.httpd.shutdown()
        stop_owner(self.run_dir)

    def events(self) -> list[ev.Event]:
        return read_log(self.run_dir).events


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("door"))
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(tmp_path_factory):
    async with Chromium(tmp_path_factory.mktemp("chromium"), host_rules=RULES) as b:
        yield b


async def steered(site: Site, browser: Chromium, key: str = "p", timeout: float = 20) -> bool:
    """Press a steering key; whether the run's log recorded a pause or resume after it."""
    before = len(site.events())
    await browser.press(key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = site.events()[before:]
        if any(isinstance(e, (ev.RunPaused, ev.RunResumed)) for e in new):
            return True
        await asyncio.sleep(0.2)
    return False


async def opened(browser: Chromium, url: str) -> None:
    """Open the page and wait for the app in it, its run started (b1 on screen)."""
    since = len(browser.frames)
    await browser.open(url)
    await browser.wait_for_text("strategy graph", since=since)
    await browser.wait_for_text("b1", since=since)


async def test_this_machines_browser_steers_a_loopback_server_without_a_token(site, browser):
    await opened(browser, f"http://127.0.0.1:{site.loopback_port}/")
    assert await steered(site, browser)


async def test_a_rebound_dns_name_is_refused_page_and_websocket(site, browser):
    since = len(browser.frames)
    await browser.open(f"http://evil.test:{site.loopback_port}/")
    body = await browser.wait_for_body("does not answer to the name evil.test")
    assert "strategy graph" not in browser.screen_text(since)
    assert not await steered(site, browser, timeout=3)
    assert "127.0.0.1" in body  # what it answers to
    # the websocket too: the rebound Host, and another site's (or port's) page
    ws = f"http://127.0.0.1:{site.loopback_port}/ws/x"
    rebound = {
        "Host": f"evil.test:{site.loopback_port}",
        "Origin": f"http://evil.test:{site.loopback_port}",
    }
    assert websocket_status(ws, rebound) == 403
    for origin in ("http://evil.test", f"http://127.0.0.1:{site.recorder.port}", "null"):
        assert websocket_status(ws, {"Origin": origin}) == 403, origin
    assert websocket_status(ws, {"Origin": f"http://127.0.0.1:{site.loopback_port}"}) == 101


async def test_behind_a_proxy_the_token_is_required(site, browser):
    assert site.printed == f"{site.public_url}#token={site.token}"
    since = len(browser.frames)
    await browser.open(site.public_url)  # the public URL without its token
    await browser.wait_for_body("A token is required here (it is served at")
    assert "strategy graph" not in browser.screen_text(since)
    assert not await steered(site, browser, timeout=3)


async def test_the_page_keeps_the_token_where_no_other_server_sees_it(site, browser):
    await opened(browser, site.printed)
    assert await steered(site, browser)
    assert await browser.evaluate("location.href") == site.public_url  # out of sight
    assert await browser.evaluate("document.cookie") == ""
    assert await browser.cookies() == []  # no cookie of any site: nothing a port shares
    # another service on the host, reached from the page's tab: nothing of the token
    await browser.open(f"http://proxy.test:{site.recorder.port}/")
    await browser.wait_for_body("another service")
    await browser.open(f"http://127.0.0.1:{site.recorder.port}/")
    await browser.wait_for_body("another service")
    assert site.recorder.headers and not any(site.token in h for h in site.recorder.headers)
    # no log holds it: the proxy's request lines, the server's terminal
    assert site.public_proxy.requests
    assert not any(site.token in line for line in site.public_proxy.requests)
    assert site.token not in site.public.output.replace(site.printed, "")
    # the page opened again in this tab (sessionStorage: this origin's alone) steers
    await opened(browser, site.public_url)
    assert await steered(site, browser)


async def test_a_proxy_that_rewrites_host_gets_a_page_that_says_why(site, browser):
    url = f"http://proxy.test:{site.rewriting.port}/"
    await browser.open(url)
    body = await browser.wait_for_body("an address this server was not told of")
    assert f"opened at http://proxy.test:{site.rewriting.port}" in body
    assert f"--public-url http://proxy.test:{site.rewriting.port}/" in body
    assert not await steered(site, browser, timeout=3)


async def test_a_proxy_that_drops_the_websocket_upgrade_gets_a_page_that_says_why(site, browser):
    await browser.open(site.plain_url)
    body = await browser.wait_for_body("without its Upgrade header")
    assert "proxy_set_header Upgrade" in body


async def test_a_forwarded_request_to_a_loopback_server_needs_the_token(site):
    base = f"http://127.0.0.1:{site.loopback_port}"
    page = {"Origin": base}
    assert http_status(f"{base}/session", page, data=b"{}")[0] == 200
    forwarded = {**page, "X-Forwarded-For": "192.0.2.7"}
    status, body = http_status(f"{base}/session", forwarded, data=b"{}")
    assert status == 403
    assert "came through a proxy (it carries X-Forwarded-For)" in json.loads(body)["why"]


async def test_a_page_of_a_finished_run_says_so_and_replays_it(site, browser, tmp_path):
    finished = tmp_path / "finished"
    shutil.copytree(EXAMPLES / "cpu-rmsnorm-run", finished)
    log = (finished / "events.jsonl").read_bytes()
    served = Served(str(finished), "--port", str(free_port()), log=tmp_path / "finished.log")
    site.servers.append(served)
    url = served.url()
    assert "is not running (it finished: max-attempts); its pages replay it" in served.output
    since = len(browser.frames)
    await browser.open(url)
    await browser.wait_for_text("The run is not running (it finished: max-attempts", since=since)
    await browser.wait_for_text("replay", since=since)
    await browser.press("p")  # a replay's p plays it; nothing is sent to any run
    await asyncio.sleep(1)
    assert (finished / "events.jsonl").read_bytes() == log


async def test_the_terminal_is_quiet_and_ctrl_c_ends_in_one_line(site, browser):
    await browser.open("about:blank")  # the pages close
    await asyncio.sleep(2)
    for server in site.servers:
        server.stop()
    for server in site.servers:
        lines = server.output.splitlines()
        # its own lines only: no access log, no page's "detached", no warning (asyncio's
        # "Unknown child process" once came on Ctrl-C)
        said = re.compile(
            r"kernelladder serve: (open |whoever has this URL|refused |stopped serving|"
            r"the run in .* is not running)"
        )
        assert all(said.match(x) for x in lines), lines
        assert not re.search(r"\?[^ ]*token|Traceback|Exception ignored|Event loop", server.output)
        assert lines[-1].startswith("kernelladder serve: stopped serving")
    refused = [x for x in site.loopback.output.splitlines() if "refused" in x]
    assert refused and all("?" not in x for x in refused)
