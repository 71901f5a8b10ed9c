"""`kernelladder-tui`: a live run in the app, or a saved one replayed.

kernelladder-tui rmsnorm [the options of `kernelladder optimize`]
kernelladder-tui --replay RUN_DIR [--speed N] [--end]
kernelladder-tui --headless ...        # the same without the app
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import ArgumentParser, UsageError

PROG = "kernelladder-tui"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `kernelladder optimize` (its own definitions, OP included)."""
    try:
        from kernelladder.cli.optimize import add_run_arguments  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        add_run_arguments = None
    if add_run_arguments is not None:
        add_run_arguments(parser)
        return
    # Only while cli/optimize.py is missing (a partial checkout): the same options.
    parser.add_argument(
        "op",
        nargs="?",
        metavar="OP|PROBLEM.py",
        help="a built-in op (kernelladder ops) or a KernelBench problem file",
    )
    run = parser.add_argument_group("the run (as `kernelladder optimize`)")
    run.add_argument("--proposer", choices=("search", "api", "code", "replay"), default="search")
    run.add_argument("--model", default=None, help="model for the api/code proposers")
    run.add_argument("--target", type=_positive, default=None, help="target speedup")
    run.add_argument("--max-attempts", type=int, default=40)
    run.add_argument("--branches", type=int, default=3)
    run.add_argument("--stagnation", type=int, default=8)
    run.add_argument("--budget-usd", type=float, default=None)
    run.add_argument("--time-limit", type=float, default=None, metavar="S")
    run.add_argument("--hints", default=None, metavar="FILE", help="global hints file")
    run.add_argument("--gate", choices=("ask", "approve", "veto"), default="ask")
    run.add_argument("--gate-timeout", type=float, default=None, metavar="S")
    run.add_argument("--run-dir", default=None, metavar="DIR")
    run.add_argument("--resume", default=None, metavar="DIR", help="continue a stopped run")
    run.add_argument("--device", choices=("cuda", "cpu"), default=None)
    run.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="per-candidate verifier timeout"
    )
    try:
        from kernelladder.cli.common import add_runner_arguments
    except ImportError:
        return
    add_runner_arguments(parser)


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
        default=1.0,
        metavar="N",
        help="replay speed (1: the run's own pace)",
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
    _add_run_arguments(parser)
    return parser


def _fallback_options(args: argparse.Namespace) -> Any:
    from kernelladder.engine.options import RunOptions

    hints = ""
    if args.hints:
        path = Path(args.hints)
        if not path.is_file():
            raise UsageError(f"no hints file {args.hints}")
        hints = path.read_text(encoding="utf-8")
    return RunOptions(
        op=args.op, proposer=args.proposer, model=args.model, target=args.target,
        max_attempts=args.max_attempts, branches=args.branches, stagnation=args.stagnation,
        budget_usd=args.budget_usd, time_limit_s=args.time_limit, hints=hints, gate=args.gate,
        gate_timeout_s=args.gate_timeout, run_dir=args.run_dir, device=args.device,
        timeout_s=args.timeout,
    )  # fmt: skip


def _make_live_run(args: argparse.Namespace) -> Any:
    """create_run / resume_run exactly as `kernelladder optimize` builds them; the app
    answers ask-gates, so the gate policy stays as given."""
    if not args.op and not args.resume:
        raise UsageError("give an op (e.g. rmsnorm), --replay RUN_DIR or --resume RUN_DIR")
    try:
        from kernelladder.cli.optimize import build_run  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        build_run = None
    if build_run is not None:
        run, _ = build_run(args, interactive=True)
        return run
    from kernelladder.engine.engine import create_run, resume_run

    try:
        if args.resume:
            return resume_run(args.resume)
        return create_run(_fallback_options(args))
    except (ValueError, OSError) as exc:
        raise UsageError(" ".join(str(exc).split()) or type(exc).__name__) from None


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
    from kernelladder.engine.state import apply, new_state

    state = new_state()
    for event in _load(run_dir):
        apply(state, event)
        line = event_line(event, state)
        if line:
            print(line, flush=True)
    Console(highlight=False).print(render_state(state))
    return 0


def _load(run_dir: Path) -> list:
    from kernelladder.app.replay import load_events

    if not (run_dir / "events.jsonl").is_file():
        raise UsageError(f"{run_dir} holds no run (no events.jsonl)")
    try:
        return load_events(run_dir)
    except Exception as exc:  # a damaged log: one line, not a traceback
        raise UsageError(f"cannot read {run_dir}: {' '.join(str(exc).split())}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return _main(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    if args.replay and (args.op or args.resume):
        raise UsageError("--replay plays a saved run: give no op and no --resume with it")
    if args.headless:
        return _headless(args)
    from kernelladder.app.app import KernelLadderApp  # textual only for the app

    if args.replay:
        run_dir = Path(args.replay)
        kwargs: dict[str, Any] = {
            "events": _load(run_dir), "run_dir": run_dir, "speed": args.speed,
            "at_end": args.end,
        }  # fmt: skip
    else:
        run = _make_live_run(args)
        own_loop = args.engine_thread or (
            sys.version_info >= (3, 12) and bool(getattr(run.options, "remote", False))
        )
        kwargs = {"run": run, "own_loop": own_loop}
    try:
        app = KernelLadderApp(theme=args.theme, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = app.run()
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
