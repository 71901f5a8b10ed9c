"""`kernelladder-tui`: a live run in the app, or a saved one replayed.

kernelladder-tui rmsnorm [the options of `kernelladder optimize`]
kernelladder-tui --replay RUN_DIR [--speed N] [--end]
kernelladder-tui --headless ...        # the same without the app
kernelladder-tui --attach RUN_DIR      # watch and steer a run another process owns
kernelladder-tui --attach RUN_DIR --read-only   # watch only
kernelladder-tui --attach RUN_DIR --or-replay   # a run that is not running: its replay
kernelladder-tui rmsnorm --detach      # start the run in the background, then attach
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import ArgumentParser, UsageError, stdout_to_devnull
from kernelladder.cli.optimize import build_run
from kernelladder.cli.run_arguments import add_run_arguments, optimize_argv
from kernelladder.engine import TUI

PROG = "kernelladder-tui"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Watch and steer a kernel optimization run, or replay a saved one.",
    )
    view = parser.add_argument_group("the app")
    view.add_argument("--replay", metavar="RUN_DIR", default=None, help="play a saved run")
    view.add_argument(
        "--speed",
        type=_positive,
        default=None,
        metavar="N",
        help="replay speed (1, the default: the run's own pace)",
    )
    view.add_argument("--end", action="store_true", help="open a replay at its end")
    view.add_argument(
        "--theme",
        default=None,
        metavar="NAME",
        help="kernelladder-dark (default), kernelladder-light or a Textual theme",
    )
    view.add_argument(
        "--headless",
        action="store_true",
        help="run or replay without the app (plain/rich progress)",
    )
    view.add_argument("--engine-thread", action="store_true", help=argparse.SUPPRESS)

    view.add_argument(
        "--attach",
        metavar="RUN_DIR",
        default=None,
        help="watch and steer a live run another process owns (quitting can detach)",
    )
    view.add_argument(
        "--read-only",
        action="store_true",
        help="with --attach: watch only, the steering keys off (kernelladder serve --read-only)",
    )
    view.add_argument(
        "--or-replay",
        action="store_true",
        help="with --attach: a run that is not running is replayed (at its end, steering "
        "off) instead of refused, and a page says why (kernelladder serve's pages)",
    )
    view.add_argument(
        "--detach",
        action="store_true",
        help="start the run as a background `kernelladder optimize` and attach to it",
    )

    add_run_arguments(parser, TUI)  # the options of a run, OP included
    return parser


def _make_live_run(args: argparse.Namespace) -> Any:
    """create_run / resume_run exactly as `kernelladder optimize` builds them; the app
    answers ask-gates, so the gate policy stays as given."""
    if not args.op and args.resume is None:
        raise UsageError("give an op (e.g. rmsnorm), --replay RUN_DIR or --resume RUN_DIR")
    run, _ = build_run(args, interactive=True)
    return run


def _headless(args: argparse.Namespace) -> int:
    """Without the app: a live run through `kernelladder optimize`'s headless view, or a
    saved run's events printed through the same view's lines."""
    if args.replay:
        return _headless_replay(Path(args.replay))
    from kernelladder.cli import optimize

    args.json = False
    return int(optimize.run(args) or 0)


def _headless_replay(run_dir: Path) -> int:
    from rich.console import Console

    from kernelladder.app.headless import event_line, render_state
    from kernelladder.engine import apply, new_state

    state = new_state()
    for event in _load(run_dir):
        apply(state, event)
        line = event_line(event, state)
        if line:
            print(line, flush=True)
    Console(highlight=False).print(render_state(state))
    return 0


def _load(run_dir: Path) -> list:
    from kernelladder.cli.replay import read_run_log

    if not (run_dir / "events.jsonl").is_file():
        raise UsageError(f"{run_dir} holds no run (no events.jsonl)")
    # a damaged log, or one with no event (the app would wait for a run that is not
    # coming): one line, as `kernelladder replay` says it
    return read_run_log(run_dir).events


def not_running_note(run_dir: Path, events: list) -> str:
    """What a page of a run that is not running says first: why, and that it replays."""
    from kernelladder.engine import events as ev

    ended = next(
        (e for e in reversed(events) if isinstance(e, (ev.RunFinished, ev.RunReopened))), None
    )
    if isinstance(ended, ev.RunFinished):
        why = f"it finished: {ended.reason}" + (f" ({ended.detail})" if ended.detail else "")
    else:
        why = _log_ending(run_dir) or "its process is gone"
    return (
        f"The run is not running ({why}). This is its replay, steering off; "
        f"`kernelladder serve --resume {run_dir}` continues it."
    )


def _log_ending(run_dir: Path) -> str:
    from kernelladder.app.replay import log_ending

    return log_ending(run_dir)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kernelladder.cli.common import apply_sandbox_choice

    apply_sandbox_choice(args)
    try:
        return _main(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `--headless ... | head`: the reader left
        stdout_to_devnull()
        return 1


def where_the_run_is(run_dir: Path, state: Any) -> str:
    """What quitting a live run prints: where its log is, how it ended, and the commands
    that replay, summarize and resume it."""
    if state.finished:
        how = f"finished: {state.finish_reason}"
    elif state.started_ts is not None:
        how = "not finished (the app was closed before the run ended)"
    else:
        how = "not started"
    return "\n".join(
        [
            f"{PROG}: the run is in {run_dir}/ ({how})",
            f"  replay it:  {PROG} --replay {run_dir}",
            f"  summary:    kernelladder replay {run_dir}",
            f"  resume it:  {PROG} --resume {run_dir}",
        ]
    )


def _check_theme(name: str | None) -> None:
    """The themes the app offers: Textual's own and the project's (the app checks again)."""
    if name is None:
        return
    from textual.theme import BUILTIN_THEMES

    from kernelladder.themes import PROJECT_THEMES

    known = {*BUILTIN_THEMES, *(theme.name for theme in PROJECT_THEMES)}
    if name not in known:
        raise UsageError(f"unknown theme {name!r} (try: {', '.join(sorted(known))})")


def _attached_run(args: argparse.Namespace) -> Any:
    """--attach RUN_DIR, or --detach: the run to attach to (AttachError -> usage)."""
    from kernelladder.app.attach import AttachedRun, AttachError, start_detached

    try:
        if args.attach is not None:
            if not args.attach.strip():
                raise UsageError("--attach is empty")
            given = [f for f, on in (("OP", args.op), ("--resume", args.resume)) if on]
            if given or args.replay or args.headless or args.detach:
                raise UsageError(
                    "--attach RUN_DIR watches a running run: give no op, --resume, "
                    "--replay, --headless or --detach with it"
                )
            try:
                return AttachedRun(args.attach, read_only=args.read_only)
            except AttachError:
                if args.or_replay and (Path(args.attach) / "events.jsonl").is_file():
                    return None  # replayed instead (_main)
                raise
        if args.headless:
            raise UsageError("--detach starts the app; --headless has none (use nohup or tmux)")
        if not args.op and args.resume is None:
            raise UsageError("--detach needs an op (e.g. rmsnorm) or --resume RUN_DIR")
        if args.resume is not None:
            run_dir, new_run = Path(args.resume), False
        elif args.run_dir:
            run_dir, new_run = Path(args.run_dir), False  # already in the arguments
        else:
            from kernelladder.engine import new_run_id

            run_dir, new_run = Path("runs") / new_run_id(Path(args.op).stem), True
        process = start_detached(optimize_argv(args), run_dir, new_run=new_run)
        print(f"{PROG}: the run goes on in the background (pid {process.pid}, log "
              f"{run_dir / 'optimize.log'})", file=sys.stderr)  # fmt: skip
        return AttachedRun(run_dir)
    except AttachError as exc:
        raise UsageError(str(exc)) from None


def _main(args: argparse.Namespace) -> int:
    if args.replay is not None and not args.replay.strip():
        raise UsageError("--replay is empty")
    if args.replay and (args.op or args.resume):
        raise UsageError("--replay plays a saved run: give no op and no --resume with it")
    paced = [
        flag for flag, given in (("--speed", args.speed is not None), ("--end", args.end)) if given
    ]
    if paced and not args.replay:
        raise UsageError(f"{' and '.join(paced)}: only with --replay RUN_DIR")
    if args.read_only and args.attach is None:
        raise UsageError("--read-only watches a run: give it with --attach RUN_DIR")
    if args.or_replay and args.attach is None:
        raise UsageError("--or-replay: only with --attach RUN_DIR")
    if paced and args.headless:
        raise UsageError(f"{' and '.join(paced)}: not with --headless, which prints the whole run")
    attached = None
    if args.attach is not None or args.detach:
        _check_theme(args.theme)
        attached = _attached_run(args)
    if args.headless:
        return _headless(args)
    from kernelladder.app.app import KernelLadderApp  # textual only for the app

    if attached is not None:
        kwargs = {"run": attached, "read_only": args.read_only}
    elif args.attach is not None:  # --or-replay: the run is not running
        run_dir = Path(args.attach)
        events = _load(run_dir)
        kwargs = {
            "events": events, "run_dir": run_dir, "at_end": True,
            "log_ending": _log_ending(run_dir), "opening_note": not_running_note(run_dir, events),
        }  # fmt: skip
    elif args.replay:
        run_dir = Path(args.replay)
        kwargs: dict[str, Any] = {
            "events": _load(run_dir), "run_dir": run_dir, "speed": args.speed or 1.0,
            "at_end": args.end, "log_ending": _log_ending(run_dir),
        }  # fmt: skip
    else:
        _check_theme(args.theme)  # before the run makes its directory and log
        run = _make_live_run(args)
        from kernelladder.engine import verifies_elsewhere

        own_loop = args.engine_thread or (
            sys.version_info >= (3, 12)
            and verifies_elsewhere(run.options)  # asyncssh's loop, Ray's asyncio
        )
        kwargs = {"run": run, "own_loop": own_loop}
    try:
        app = KernelLadderApp(theme=args.theme, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = app.run()
    if attached is not None and not attached.finished_seen and not app.in_browser:
        # (a page's terminal is the serve command's: leaving a page is not news there)
        print(f"{PROG}: detached; the run goes on. Attach again: {PROG} --attach "
              f"{attached.run_dir}", file=sys.stderr)  # fmt: skip
    elif not args.replay and getattr(kwargs.get("run"), "run_dir", None) is not None:
        print(where_the_run_is(Path(kwargs["run"].run_dir), app.fold.state), file=sys.stderr)
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
