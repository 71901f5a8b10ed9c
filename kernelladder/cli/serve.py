"""`kernelladder serve RUN_DIR|OP`: the app in a browser (textual-serve).

Every browser connection gets its own `kernelladder-tui --attach RUN_DIR --or-replay`
(textual-serve runs the command per websocket), so any number of people watch one run
and leaving a page stops nothing; a page follows the run into a resumed session, and a
page of a run that is not running replays it. Given an OP (with the options of
`kernelladder optimize`) it starts the run in the background first, as
`kernelladder-tui --detach` does, once the port is known to be free.

Whoever reaches the page can steer the run; app/web_server.py keeps the door (docs/
WEB.md): the server binds to 127.0.0.1 unless told otherwise, answers only to the names
it was bound to or told (--public-url), and requires a token on an address others may
reach, behind a proxy (--public-url, or a request that came through one) and with
--token-always. The printed URL carries the token after `#`; the page keeps it itself.
`--read-only` serves the app with its steering keys off, for sharing.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kernelladder.cli import UsageError
from kernelladder.cli.run_arguments import optimize_argv

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def add_parser(subparsers: Any) -> None:
    from kernelladder.cli.run_arguments import add_run_arguments
    from kernelladder.engine import SERVE

    p = subparsers.add_parser(
        "serve",
        help="watch and steer a run from a browser (RUN_DIR, or an OP to start one)",
        description=__doc__.splitlines()[0],
    )
    add_serve_arguments(p)
    add_run_arguments(p, SERVE)  # OP and the run's options, for a run started here
    for action in p._actions:
        if action.dest == "op":
            action.metavar = "RUN_DIR|OP"
            action.help = (
                "a run's directory (live: steered; not running: replayed), or an op (or "
                "problem file) to start a run of"
            )
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
        help="the URL browsers reach the server at, when a proxy stands in front: the "
        "server answers to its name, and the token is required (docs/WEB.md)",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a port (1-65535): {text!r}")
    return value


def needs_token(host: str, always: bool = False, public_url: str | None = None) -> bool:
    """Whether every request needs the token: an address other machines may reach, a
    public URL (a proxy stands in front), or --token-always. On loopback without one,
    only a request that came through a proxy needs it (web_server.Door.token_reason)."""
    from kernelladder.app.web_server import is_loopback

    return always or not is_loopback(host) or bool(public_url)


def attach_command(run_dir: Path, *, read_only: bool, theme: str | None = None) -> str:
    """The shell command textual-serve starts for each browser connection."""
    words = [
        sys.executable, "-m", "kernelladder.cli.tui", "--attach", str(run_dir.resolve()),
        "--or-replay",  # a run that is not running (yet, or any more): its replay
    ]  # fmt: skip
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


def _start_run(args: argparse.Namespace) -> Path:
    from kernelladder.app.attach import AttachError, start_detached
    from kernelladder.engine import new_run_id

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


def _run_dir(args: argparse.Namespace) -> Path:
    """The run to serve: RUN_DIR as given (live: attached; not running: replayed), or
    one started here in the background."""
    from kernelladder.engine import AttachError, live_owner, read_log

    run_dir = _run_dir_given(args)
    if run_dir is None:
        if not args.op and args.resume is None:
            raise UsageError("serve needs RUN_DIR (a run) or an OP to start one")
        return _start_run(args)
    if args.resume is not None:
        raise UsageError(f"{run_dir} is a run directory: give it alone, or --resume it")
    try:
        live_owner(run_dir)
    except AttachError:
        events = read_log(run_dir).events
        ended = next((e for e in reversed(events) if e.kind == "run_finished"), None)
        why = f"it finished: {ended.reason}" if ended is not None else "no process owns its log"
        print(
            f"kernelladder serve: the run in {run_dir} is not running ({why}); its pages "
            f"replay it (--resume {run_dir} continues it)",
            file=sys.stderr,
        )
    return run_dir


def _check_public_url(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--public-url {url!r}: give the URL browsers open, http(s)://HOST[:PORT]/"
        )
    return url.strip()


def run(args: argparse.Namespace) -> int:
    try:
        from kernelladder.app.web_server import Door, WebServer, bind
    except ModuleNotFoundError:
        raise UsageError(
            "kernelladder serve needs textual-serve: pip install textual-serve"
        ) from None
    if not args.host.strip():
        raise UsageError("--host is empty")
    public_url = _check_public_url(args.public_url)
    try:  # the port before anything starts: a taken one leaves no run behind
        sock = bind(args.host, args.port)
    except OSError as exc:  # the port is taken, or the address is not this machine's
        # (create_server's own words add the address again; a name lookup's are fine)
        why = os.strerror(exc.errno) if (exc.errno or 0) > 0 else (exc.strerror or str(exc))
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {why}") from None
    try:
        run_dir = _run_dir(args)
    except BaseException:
        sock.close()
        raise
    door = Door(
        host=args.host, port=args.port, token=secrets.token_urlsafe(24),
        token_always=args.token_always, public_url=public_url,
    )  # fmt: skip
    server = WebServer(
        attach_command(run_dir, read_only=args.read_only),
        door=door,
        title=f"KernelLadder: {run_dir.name}" + (" (read-only)" if args.read_only else ""),
    )
    server.serve_on(sock)
    from kernelladder.engine import writer_active

    going = "; the run goes on" if writer_active(run_dir) else ""
    print(
        f"kernelladder serve: stopped serving{going}. Serve it again: "
        f"kernelladder serve {shlex.quote(str(run_dir))}",
        file=sys.stderr,
    )
    return 0
