"""`kernelladder serve RUN_DIR|OP`: the app in a browser (textual-serve).

Every browser connection gets its own `kernelladder-tui --attach RUN_DIR` (textual-serve
runs the command per websocket), so any number of people watch one run and leaving a page
stops nothing. Given an OP (with the options of `kernelladder optimize`) it starts the
run in the background first, as `kernelladder-tui --detach` does.

Whoever reaches the page can steer the run, so the server binds to 127.0.0.1 unless told
otherwise, and on an address other machines can reach it requires a token: the printed
URL carries it (?token=...), the page then keeps it in a cookie for its websocket, and a
request without it is refused (403). A loopback address (127.0.0.0/8, ::1, localhost)
reaches only this machine and needs none unless --token-always. `--read-only` serves
the app with its steering keys off, for sharing.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import secrets
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import ArgumentParser, UsageError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
TOKEN_PARAM = "token"
REFUSED = "kernelladder serve: a token is required; open the URL the serve command printed\n"


def add_parser(subparsers: Any) -> None:
    from kernelladder.cli.optimize import add_run_arguments

    p = subparsers.add_parser(
        "serve",
        help="watch and steer a run from a browser (RUN_DIR, or an OP to start one)",
        description=__doc__.splitlines()[0],
    )
    add_serve_arguments(p)
    add_run_arguments(p)  # OP and the run's options, for a run started here
    for action in p._actions:
        if action.dest == "op":
            action.metavar = "RUN_DIR|OP"
            action.help = "a live run's directory, or an op (or problem file) to start a run of"
    p.set_defaults(func=run)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    web = p.add_argument_group("the web server")
    web.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help="address to bind (default 127.0.0.1; any non-loopback address needs the "
        "printed token)",
    )
    web.add_argument("--port", type=_port, default=DEFAULT_PORT, help="default 8000")
    web.add_argument(
        "--read-only", action="store_true", help="watch only: the steering keys are off"
    )
    web.add_argument(
        "--token-always",
        action="store_true",
        help="require the token on a loopback address too (a machine other people log in to)",
    )
    web.add_argument(
        "--public-url",
        default=None,
        metavar="URL",
        help="the URL browsers reach the server at, when a proxy stands in front",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a port (1-65535): {text!r}")
    return value


def is_loopback(host: str) -> bool:
    """Only this machine reaches the address: 127.0.0.0/8, ::1 or the name localhost."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, others may reach it


def needs_token(host: str, always: bool = False) -> bool:
    return always or not is_loopback(host)


def browse_url(host: str, port: int, token: str | None, public_url: str | None = None) -> str:
    """The URL to open (the token in it when one is required)."""
    if public_url:
        base = public_url.rstrip("/")
    else:
        shown = host
        if host in ("0.0.0.0", "::", ""):
            shown = socket.gethostname()  # every address: name the machine
        elif ":" in host:
            shown = f"[{host}]"
        base = f"http://{shown}:{port}"
    return f"{base}/" + (f"?{TOKEN_PARAM}={token}" if token else "")


def attach_command(run_dir: Path, *, read_only: bool, theme: str | None = None) -> str:
    """The shell command textual-serve starts for each browser connection."""
    words = [sys.executable, "-m", "kernelladder.cli.tui", "--attach", str(run_dir.resolve())]
    if read_only:
        words.append("--read-only")
    if theme:
        words += ["--theme", theme]
    return shlex.join(words)


# --- the run: given, or started here -------------------------------------------------------


def _run_dir_given(args: argparse.Namespace) -> Path | None:
    """RUN_DIR when the positional names a run's directory, else None (an OP)."""
    if args.op and (Path(args.op) / "events.jsonl").is_file():
        return Path(args.op)
    return None


def optimize_argv(args: argparse.Namespace) -> list[str]:
    """`kernelladder optimize`'s command line for the run options given here (the web
    server's own left out): each option that differs from its default, as given."""
    from kernelladder.cli.optimize import add_run_arguments

    parser = ArgumentParser(add_help=False)
    add_run_arguments(parser)
    out: list[str] = [args.op] if args.op else []
    for action in parser._actions:
        if not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:  # store_true / store_const: the flag alone
            out.append(flag)
        else:
            out += [flag, str(value)]
    return out


def _start_run(args: argparse.Namespace) -> Path:
    from kernelladder.app.attach import AttachError, start_detached
    from kernelladder.engine.engine import new_run_id

    if args.resume is not None:
        run_dir, new_run = Path(args.resume), False
    elif args.run_dir:
        run_dir, new_run = Path(args.run_dir), False
    else:
        run_dir, new_run = Path("runs") / new_run_id(Path(args.op).stem), True
    try:
        process = start_detached(optimize_argv(args), run_dir, new_run=new_run)
    except AttachError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"kernelladder serve: the run goes on in the background (pid {process.pid}, log "
        f"{run_dir / 'optimize.log'})",
        file=sys.stderr,
    )
    return run_dir


def _live_run_dir(args: argparse.Namespace) -> Path:
    from kernelladder.engine.control import AttachError, live_owner

    run_dir = _run_dir_given(args)
    if run_dir is None:
        if not args.op and args.resume is None:
            raise UsageError("serve needs RUN_DIR (a live run) or an OP to start one")
        return _start_run(args)
    if args.resume is not None:
        raise UsageError(f"{run_dir} is a run directory: give it alone, or --resume it")
    try:
        live_owner(run_dir)
    except AttachError as exc:
        # a saved run is replayed in the terminal app; --resume continues it here as well
        why = str(exc).replace("watch it with --replay", "watch it with kernelladder-tui --replay")
        raise UsageError(why) from None
    return run_dir


# --- the server ----------------------------------------------------------------------------


async def _listening(host: str, port: int, wait_s: float = 5.0) -> bool:
    """Wait (at most wait_s) until host:port takes a connection; a wildcard address is
    tried on this machine's loopback."""
    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while loop.time() < deadline:
        try:
            _, writer = await asyncio.open_connection(target, port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        return True
    return False


def make_server(
    command: str,
    *,
    host: str,
    port: int,
    token: str | None,
    title: str,
    public_url: str | None = None,
) -> Any:
    """textual-serve's Server with a token check in front of every route (when a token is
    given) and a same-origin check on its websocket (always: another site's page must
    not reach a run through the browser of someone who has it open)."""
    from aiohttp import web
    from textual_serve.server import Server

    cookie = f"kernelladder_serve_{port}"

    def token_ok(request: web.Request) -> str | None:
        """The valid token the request carried (query or cookie), else None."""
        for given in (request.query.get(TOKEN_PARAM), request.cookies.get(cookie)):
            if given and token and hmac.compare_digest(given.encode(), token.encode()):
                return given
        return None

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin and request.path == "/ws" and origin.split("://", 1)[-1] != request.host:
            return web.Response(status=403, text="kernelladder serve: another site's page\n")
        if token is None:
            return await handler(request)
        if token_ok(request) is None:
            return web.Response(status=403, text=REFUSED)
        response = await handler(request)
        if request.query.get(TOKEN_PARAM):  # the page's websocket and files carry it on
            response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
        return response

    class GuardedServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

        async def handle_index(self, request: web.Request) -> Any:
            # the page's files and websocket at the address the browser used
            if public_url is None:
                self.public_url = f"{request.scheme}://{request.host}"
            return await super().handle_index(request)

        async def on_startup(self, app: web.Application) -> None:
            # aiohttp's startup comes before the socket is bound: the URL is printed once
            # the port takes connections (a URL opened at once was refused otherwise)
            self._announced = asyncio.ensure_future(self._announce())

        async def _announce(self) -> None:
            await _listening(host, port)
            print(
                f"kernelladder serve: open {browse_url(host, port, token, public_url)}",
                flush=True,
            )
            if token is not None:
                print(
                    "kernelladder serve: whoever has this URL can steer the run; Ctrl-C stops "
                    "serving (the run goes on)",
                    flush=True,
                )

    return GuardedServer(command, host=host, port=port, title=title, public_url=public_url or None)


def run(args: argparse.Namespace) -> int:
    try:
        import textual_serve  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            "kernelladder serve needs textual-serve: pip install textual-serve"
        ) from None
    if not args.host.strip():
        raise UsageError("--host is empty")
    run_dir = _live_run_dir(args)
    token = secrets.token_urlsafe(24) if needs_token(args.host, args.token_always) else None
    server = make_server(
        attach_command(run_dir, read_only=args.read_only),
        host=args.host,
        port=args.port,
        token=token,
        title=f"KernelLadder: {run_dir.name}" + (" (read-only)" if args.read_only else ""),
        public_url=args.public_url,
    )
    try:
        server.serve()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    print(
        f"kernelladder serve: stopped serving; the run goes on. Attach again: "
        f"kernelladder serve {run_dir}",
        file=sys.stderr,
    )
    return 0
