"""The web server of `kernelladder serve`: textual-serve's terminal, behind a door.

Each page runs its own `kernelladder-tui --attach RUN_DIR --or-replay` (textual-serve
starts the command per websocket), so a page is an attached app; this module decides
who gets one (docs/WEB.md, "Who may connect"):

- Host: every request (the page, its files, its check, its websocket) must name the
  server by a name it was bound to or told (--public-url): a DNS name an attacker
  rebinds to this address is refused, so another site cannot reach a loopback server
  through the browser of someone who has it open.
- Origin: the page's check and its websocket must come from this server's page: the
  Origin is the Host the request came to, or the public URL's origin.
- The token, where one is required (an address others may reach, a public URL, a
  request that came through a proxy, --token-always): the printed URL carries it after
  `#`, which a browser never sends to a server nor puts in a Referer; the page keeps it
  in sessionStorage, which belongs to its origin (scheme, host and port), and sends it
  to its own server only, in a header and as a websocket subprotocol. No cookie: a
  cookie is sent to every port of the host, to whatever else listens there.
- The terminal stays quiet: refused requests are said (path only, never a query; at
  most one line a minute for one address and reason), pages opening and closing are
  not; a page's app writes its errors to a file, and the page shows its last line.
Nothing a page shows comes from the request: why a session cannot start or has ended
is said on the page from what the server knows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import html
import ipaddress
import logging
import shlex
import shutil
import signal
import socket
import string
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

PAGE = Path(__file__).with_name("web_page.html")
TOKEN_HEADER = "X-KernelLadder-Token"
APP_PROTOCOL = "kernelladder"  # the websocket subprotocol the server answers with
TOKEN_PROTOCOL = "kernelladder-token."  # + the token: a header no access log keeps
# headers a proxy adds: such a request did not come from this machine's own browser
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP", "Via")
PAGES_KEPT = 256  # why a page's session ended, for its own last question
REFUSAL_QUIET_S = 60.0  # one line a minute for one address and one reason
NO_UPGRADE = (
    "The app's websocket reached the server without its Upgrade header: the proxy in "
    "front must pass it on (nginx: proxy_http_version 1.1; proxy_set_header Upgrade "
    '$http_upgrade; proxy_set_header Connection "upgrade"; see docs/WEB.md).'
)
LEFT = "The app was closed; the run goes on. Open the page again to watch it."

log = logging.getLogger("kernelladder.serve")


def is_loopback(host: str) -> bool:
    """Only this machine reaches the address: 127.0.0.0/8, ::1 or the name localhost."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, others may reach it


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def host_name(value: str) -> str:
    """The name in a Host header or an origin's netloc, lowercased, without port or
    brackets ("" when there is none)."""
    try:
        parts = urlsplit("//" + value.strip())
        parts.port  # noqa: B018 (a port that is not a number: no name at all)
        return (parts.hostname or "").lower()
    except ValueError:
        return ""


@dataclass
class Door:
    """Who may open the app: the names the server answers to, and the token."""

    host: str  # the address bound
    port: int
    token: str  # made fresh each start; required only where token_reason says
    token_always: bool = False
    public_url: str | None = None
    names: frozenset[str] = field(init=False)  # host names (not addresses) answered to
    any_address: bool = field(init=False)  # any IP address literal is answered to

    def __post_init__(self) -> None:
        bound = self.host.strip().strip("[]").lower()
        names: set[str] = set()
        self.any_address = bound in ("", "0.0.0.0", "::")
        if self.any_address:  # every address of this machine: its names too
            names |= {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
        elif is_loopback(bound):
            names.add("localhost")
        elif _ip(bound) is None:
            names.add(bound)
        self._addresses = {bound} if _ip(bound) is not None else _addresses_of(bound)
        if self.public_url:
            names.add(host_name(urlsplit(self.public_url).netloc))
        self.names = frozenset(n for n in names if n)

    @property
    def requires_token(self) -> bool:
        """Whether every request needs the token (the printed URL then carries it);
        otherwise only a forwarded one does (token_reason)."""
        return self.token_always or not is_loopback(self.host) or bool(self.public_url)

    @property
    def public_origin(self) -> str | None:
        if not self.public_url:
            return None
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}".lower()

    def answers_to(self, host_header: str) -> bool:
        """Whether a Host header names this server (its port is not asked: a proxy may
        drop it, as nginx's $host does)."""
        name = host_name(host_header)
        if not name:
            return False
        if name in self.names:
            return True
        address = _ip(name)
        if address is None:
            return False  # a name the server was not told of: a rebound DNS name
        if self.any_address or str(address) in self._addresses:
            return True
        return is_loopback(self.host) and address.is_loopback

    def shown_names(self) -> str:
        shown = sorted(self.names | self._addresses)
        if self.any_address:
            shown.append("this machine's addresses")
        elif is_loopback(self.host):
            shown.append("127.0.0.1")
        return ", ".join(dict.fromkeys(shown))

    def origin_refusal(self, origin: str | None, host_header: str) -> str | None:
        """Why a page at `origin` may not open the app here (None: it may)."""
        if not origin or origin == "null":
            return "The request came from no page of this server (no Origin)."
        given = origin.rstrip("/").lower()
        if given == self.public_origin:
            return None
        netloc = urlsplit(given).netloc
        if netloc == host_header.strip().lower() and self.answers_to(netloc):
            return None
        told = f" (it was told {self.public_url})" if self.public_url else ""
        return (
            f"This page was opened at {origin}, an address this server was not told of"
            f"{told}. Behind a proxy, serve with --public-url {origin}/ and let the proxy "
            "pass the Host header and the websocket upgrade (docs/WEB.md)."
        )

    def token_reason(self, request: web.BaseRequest) -> str | None:
        """Why this request needs the token; None when it does not (this machine's own
        browser on a loopback address, no proxy in between)."""
        if self.token_always:
            return "--token-always"
        if not is_loopback(self.host):
            return f"the server listens on {self.host}, which other machines may reach"
        if self.public_url:
            return f"it is served at {self.public_url}"
        for name in FORWARDING_HEADERS:
            if name in request.headers:
                return f"the request came through a proxy (it carries {name})"
        if request.remote and not is_loopback(request.remote):
            return f"the request came from {request.remote}"
        return None

    def token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


def _addresses_of(name: str) -> set[str]:
    """The addresses a bound host name resolves to (they reach the server as it does)."""
    if not name or name in ("0.0.0.0", "::") or is_loopback(name):
        return set()
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except OSError:
        return set()


def _given_token(request: web.BaseRequest) -> str | None:
    """The token a page sent: its header (the check) or its websocket subprotocol."""
    given = request.headers.get(TOKEN_HEADER)
    if given:
        return given
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    for protocol in (p.strip() for p in offered.split(",")):
        if protocol.startswith(TOKEN_PROTOCOL):
            return protocol[len(TOKEN_PROTOCOL) :]
    return None


class WebServer(Server):
    """textual-serve's Server with the door in front: one bound socket (checked before
    anything starts), our page, the check a page asks before it opens the app, and a
    websocket that starts the app only for a page that passed."""

    def __init__(self, command: str, *, door: Door, title: str) -> None:
        super().__init__(command, host=door.host, port=door.port, title=title)
        self.door = door
        self.page_title = title
        self.ended: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.services: set[AppService] = set()
        self._refusals: dict[tuple[str, str], float] = {}
        self._errors = Path(tempfile.mkdtemp(prefix="kernelladder-serve-"))

    # --- the routes ----------------------------------------------------------------------

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.add_routes(
            [
                web.get("/", self.handle_index),
                web.post("/session", self.handle_session),
                web.get("/ws/{page}", self.handle_websocket),
                web.static("/static", self.statics_path),
            ]
        )
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        if not self.door.answers_to(host):
            self._said_refused(request, "an unknown Host")
            why = (
                f"This server does not answer to the name {host_name(host) or '(none)'}: "
                f"it answers to {self.door.shown_names()}. Behind a proxy, serve with "
                "--public-url and the address browsers use (docs/WEB.md)."
            )
            return _page_response(why, status=403)
        response = await handler(request)
        if isinstance(response, web.Response):
            response.headers.setdefault("Cache-Control", "no-store")
            response.headers["Referrer-Policy"] = "no-referrer"
            response.headers["X-Frame-Options"] = "DENY"
        return response

    async def handle_index(self, request: web.Request) -> web.Response:
        page = string.Template(PAGE.read_text(encoding="utf-8")).substitute(
            title=html.escape(self.page_title),
            font_size=to_int(request.query.get("fontsize", "16"), 16),
            protocol=APP_PROTOCOL,
            token_protocol=TOKEN_PROTOCOL,
            token_header=TOKEN_HEADER,
        )
        response = web.Response(text=page, content_type="text/html")
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        return response

    def _refusal(self, request: web.BaseRequest) -> tuple[str, str] | None:
        """(what, why) this page may not open the app (its Origin, its token): `what` for
        the terminal, `why` for the page; None: it may."""
        why = self.door.origin_refusal(request.headers.get("Origin"), request.headers["Host"])
        if why:
            return ("another page's request" if request.headers.get("Origin") else "no Origin"), why
        reason = self.door.token_reason(request)
        if reason is None:
            return None
        given = _given_token(request)
        if not given:
            return "no token", (
                f"A token is required here ({reason}): open the URL `kernelladder serve` "
                "printed, which ends in #token=…"
            )
        if not self.door.token_ok(given):
            return "a wrong token", (
                "The token is not this server's (each start makes a new one): open the URL "
                "`kernelladder serve` printed last."
            )
        return None

    async def handle_session(self, request: web.Request) -> web.Response:
        """The page asks before it opens the app, and again once its session ended."""
        refused = self._refusal(request)
        if refused:
            self._said_refused(request, refused[0])
            return web.json_response({"ok": False, "why": refused[1]}, status=403)
        try:
            page = str((await request.json()).get("page") or "")[:64]
        except Exception:
            page = ""
        answer: dict[str, Any] = {"ok": True}
        if page in self.ended:
            answer["ended"] = self.ended[page]
        return web.json_response(answer)

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        page = request.match_info["page"][:64]
        refused = self._refusal(request)
        if refused is None and request.headers.get("Upgrade", "").lower() != "websocket":
            refused = "no websocket upgrade", NO_UPGRADE
        if refused:
            self._note_ended(page, refused[1])
            self._said_refused(request, refused[0])
            return web.Response(status=403, text=refused[1] + "\n")
        websocket = web.WebSocketResponse(heartbeat=15, protocols=(APP_PROTOCOL,))
        errors = self._errors / f"{page or 'page'}-{time.monotonic_ns()}.err"
        service = AppService(
            f"{self.command} 2>{shlex.quote(str(errors))}",  # its errors: the page says them
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
        )
        self.services.add(service)
        try:
            await websocket.prepare(request)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            await service.start(width, height)
            try:
                await self._process_messages(websocket, service)
            finally:
                await service.stop()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await websocket.close()
        except Exception as error:  # the page's session, not the server, ends
            log.warning("a page's session failed: %s", error)
        finally:
            self.services.discard(service)
            self._note_ended(page, _last_line(errors) or LEFT)
            with contextlib.suppress(OSError):
                errors.unlink()
        return websocket

    # --- what the server says -----------------------------------------------------------

    def _note_ended(self, page: str, why: str) -> None:
        if not page:
            return
        self.ended[page] = why
        while len(self.ended) > PAGES_KEPT:
            self.ended.popitem(last=False)

    def _said_refused(self, request: web.BaseRequest, what: str) -> None:
        """One line for a refused request (its path, never its query), at most one a
        minute for one address and one reason."""
        key = (request.remote or "?", what)
        now = time.monotonic()
        if now - self._refusals.get(key, -REFUSAL_QUIET_S) < REFUSAL_QUIET_S:
            return
        self._refusals[key] = now
        print(
            f"kernelladder serve: refused {request.method} {request.path} from "
            f"{request.remote or '?'}: {what}",
            file=sys.stderr,
            flush=True,
        )

    async def on_startup(self, app: web.Application) -> None:
        door = self.door
        print(f"kernelladder serve: open {browse_url(door)}", flush=True)
        if door.requires_token:
            print(
                "kernelladder serve: whoever has this URL can steer the run; Ctrl-C stops "
                "serving (the run goes on)",
                flush=True,
            )

    async def on_shutdown(self, app: web.Application) -> None:
        """Every page's app ends while the loop still runs (a process left to the
        garbage collector after the loop closed is what warned on Ctrl-C)."""
        services = list(self.services)
        for service in services:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(service.stop(), 5)
        for service in services:
            process = getattr(service, "_process", None)
            if process is None:
                continue
            # waited for first: kill() polls, and a poll that reaps a process Ctrl-C has
            # just ended leaves asyncio's child watcher warning of an unknown child
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(process.wait()), 3)
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.wait(), 5)

    def serve_on(self, sock: socket.socket) -> None:
        """Serve on `sock` (bound already) until Ctrl-C or SIGTERM."""
        logging.basicConfig(level=logging.WARNING, format="kernelladder serve: %(message)s")
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_exit)
        try:
            web.run_app(
                self._make_app(),
                sock=sock,
                handle_signals=False,
                loop=loop,
                print=None,
                access_log=None,  # refusals are said by _said_refused; nothing else
                shutdown_timeout=5.0,
            )
        finally:
            asyncio.set_event_loop(None)
            shutil.rmtree(self._errors, ignore_errors=True)


def _page_response(why: str, *, status: int) -> web.Response:
    body = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><meta name='referrer' "
        "content='no-referrer'><title>KernelLadder</title></head><body style='background:"
        "#0c181f;color:#eee;font-family:monospace;padding:32px'><h1 style='font-size:17px'>"
        f"The app cannot open here</h1><p>{html.escape(why)}</p></body></html>"
    )
    return web.Response(status=status, text=body, content_type="text/html")


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def browse_url(door: Door) -> str:
    """The URL to open: the token after `#` (never sent to a server) when one is needed."""
    if door.public_url:
        base = door.public_url.rstrip("/")
    else:
        shown = door.host
        if door.host in ("0.0.0.0", "::", ""):
            shown = socket.gethostname()  # every address: name the machine
        elif ":" in door.host:
            shown = f"[{door.host}]"
        base = f"http://{shown}:{door.port}"
    return f"{base}/" + (f"#token={door.token}" if door.requires_token else "")


def bind(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound now: a taken port or an address that is not
    this machine's is an OSError before anything is started."""
    wildcard = {"": "0.0.0.0"}.get(host, host)
    infos = socket.getaddrinfo(
        wildcard, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )  # a name: its first address, as a browser would try it
    family, _, _, _, address = infos[0]
    dualstack = family == socket.AF_INET6 and address[0] == "::" and socket.has_dualstack_ipv6()
    sock = socket.create_server(address, family=family, backlog=128, dualstack_ipv6=dualstack)
    sock.setblocking(False)
    return sock
