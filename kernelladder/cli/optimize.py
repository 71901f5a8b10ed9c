"""`kernelladder optimize OP|PROBLEM.py`: a headless optimization run.

A rich live view on a terminal, plain progress lines otherwise; `--json` prints the
final summary (the same as `kernelladder replay RUN_DIR --json`) as one JSON object on
stdout, progress then going to stderr. Ctrl-C stops cleanly (in-flight attempts finish
and are recorded); a second Ctrl-C cancels them (recorded; `--resume` re-runs them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import require_local_gpu
from kernelladder.cli.run_arguments import (
    add_run_arguments,
    options_from_args,
    resume_overrides,
    unpriced_notice,
)
from kernelladder.engine import OPTIMIZE

EXIT_OK, EXIT_FAILURE = 0, 1


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "optimize",
        help="run a headless optimization",
        description=__doc__.splitlines()[0],
    )
    add_run_arguments(p, OPTIMIZE)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")

    p.add_argument(
        "--detached",
        action="store_true",
        help="no terminal: ask-gates wait for an app attached with kernelladder-tui --attach "
        "(kernelladder-tui --detach starts runs this way)",
    )

    p.set_defaults(func=run)


def _recorded_files(run_dir: Path) -> list[str]:
    """What a run would overwrite in `run_dir`: meta.json and anything under attempts/."""
    from kernelladder.engine import ATTEMPTS_DIR, META_FILE

    found = [META_FILE] if (run_dir / META_FILE).exists() else []
    try:
        if any((run_dir / ATTEMPTS_DIR).iterdir()):
            found.append(f"{ATTEMPTS_DIR}/")
    except OSError:  # no attempts/ (or unreadable: creating the run says so)
        pass
    return found


def _check_new_run_dir(run_dir: str | None) -> None:
    """A new run needs a directory it can own: new or empty; not a file, not one holding
    a run's files without its log (they were never this run's), not one holding other
    files (a run would be mixed into them). create_run refuses a whole run."""
    from kernelladder.engine import DETACHED_LOG, EVENTS_FILE

    if run_dir is None:
        return
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--run-dir {run_dir} is not a directory")
    if path.is_dir() and not (path / EVENTS_FILE).exists():
        found = _recorded_files(path)
        if found:
            raise UsageError(
                f"--run-dir {run_dir} holds {' and '.join(found)} but no {EVENTS_FILE}: "
                "a new run would overwrite them; give another directory"
            )
        try:  # a --detach run's own output may already be there
            holds_files = any(p.name != DETACHED_LOG for p in path.iterdir())
        except OSError:  # unreadable: creating the run says so
            holds_files = False
        if holds_files:
            raise UsageError(
                f"--run-dir {run_dir} is not empty and holds no run; pick an empty or new "
                "directory, or --resume a run"
            )


def _check_resumable(run_dir: str) -> None:
    """A log with no events beside recorded attempts lost its history: a resume would
    start numbering at 1 again and overwrite those attempts."""
    from kernelladder.engine import ATTEMPTS_DIR, read_log

    path = Path(run_dir)
    if not read_log(path).events and f"{ATTEMPTS_DIR}/" in _recorded_files(path):
        raise UsageError(
            f"{run_dir}: events.jsonl holds no events but attempts/ holds files; "
            "resuming would overwrite them (the log was damaged)"
        )


def _check_local_device(options: Any) -> None:
    """A local cuda run on a machine without a GPU stops here, before its directory is
    made or its log touched (as `check --device cuda` does); a runner that verifies
    elsewhere uses its own GPUs, and says what it lacks here (Ray: the package)."""
    from kernelladder.engine import chosen_kind

    kind = chosen_kind(options)
    problem = kind.check(options) if kind is not None and kind.check is not None else ""
    if problem:
        raise UsageError(problem)
    if kind is None or not kind.elsewhere:
        require_local_gpu(options.device)


def _os_error_line(exc: OSError) -> str:
    what = f"{exc.filename}: {exc.strerror}" if exc.strerror and exc.filename else exc
    return " ".join(f"cannot create or write the run directory: {what}".split())


def _start_workers_ahead(options: Any) -> None:
    """A GPU run's workers start now, while this process imports torch and builds the
    run (engine/runners/local.py); a run that then fails to build kills them."""
    from kernelladder.engine import start_workers_ahead

    with contextlib.suppress(Exception):
        start_workers_ahead(options)


def _discard_workers_ahead() -> None:
    from kernelladder.verifier.host.pool import discard_unclaimed

    discard_unclaimed()


def build_run(args: argparse.Namespace, *, interactive: bool) -> tuple[Any, list[str]]:
    """create_run / resume_run from the command line; UsageError for bad input. Without a
    terminal (`interactive` False) an ask-gate policy gives way to an unattended one for
    this session only: the saved options keep "ask", so a resume on a terminal asks. A
    run that does not build kills the workers started ahead for it."""
    try:
        return _build_run(args, interactive=interactive)
    except BaseException:
        _discard_workers_ahead()
        raise


def _build_run(args: argparse.Namespace, *, interactive: bool) -> tuple[Any, list[str]]:
    from kernelladder.engine import (
        LogError,
        ProposerError,
        RunOptions,
        create_run,
        read_meta,
        resume_run,
        unattended_gate_policy,
    )

    for flag in ("--resume", "--run-dir", "--replay-from", "--hints"):
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None and not value.strip():  # `--resume "$UNSET"`: not a new run
            raise UsageError(f"{flag} is empty")
    notices: list[str] = []

    def session_gate(options: Any) -> str | None:
        if interactive:
            return None
        policy, why = unattended_gate_policy(options)
        if why:
            notices.append(why)
        return policy

    try:
        if args.resume:
            recorded = read_meta(args.resume).get("options") or {}
            if not isinstance(recorded, dict):
                raise UsageError(f"{args.resume}: meta.json options is not an object")
            _check_resumable(args.resume)
            overrides = resume_overrides(args, recorded)
            # the options this session runs with (resume_run itself says if meta is bad)
            in_force = RunOptions.from_dict({"op": "", **recorded, **overrides})
            _check_local_device(in_force)
            gate = session_gate(in_force)
            return resume_run(
                args.resume, overrides=overrides, notices=notices, gate_policy=gate
            ), notices
        options = options_from_args(args)
        _check_new_run_dir(args.run_dir)
        _start_workers_ahead(options)
        _check_local_device(options)
        gate = session_gate(options)
        notices += unpriced_notice(options)
        return create_run(options, notices=notices, gate_policy=gate), notices
    except UsageError:
        raise
    # OpLoadError is a ValueError (imported lazily: it would import torch)
    except (LogError, ProposerError, ValueError) as exc:
        raise UsageError(" ".join(str(exc).split()) or type(exc).__name__) from None
    except OSError as exc:  # the run directory cannot be created or written
        raise UsageError(_os_error_line(exc)) from None


async def drive(run: Any, view: Any) -> Any:
    """Run to the end with the view following; Ctrl-C (or SIGTERM) stops cleanly, a
    second one cancels in-flight attempts. Returns the final state."""
    loop = asyncio.get_running_loop()
    presses = 0

    async def stop(cancel: bool) -> None:
        while not run.started and not run.finished:
            await asyncio.sleep(0.05)
        try:
            await run.stop("user", cancel=cancel)
        except ValueError:
            pass  # finished meanwhile

    def interrupted() -> None:
        nonlocal presses
        presses += 1
        if run.finished or presses > 2:
            return
        if presses == 1:
            print("kernelladder: stopping; in-flight attempts finish (Ctrl-C again cancels them)",
                  file=sys.stderr, flush=True)  # fmt: skip
        asyncio.ensure_future(stop(cancel=presses > 1))

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, interrupted)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    follower = asyncio.ensure_future(view.follow())
    try:
        state = await run.run()
        try:
            await follower
        except Exception as exc:  # the view is a convenience: the run and its log stand
            print(f"kernelladder: the progress view failed: {exc}", file=sys.stderr)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return state


def run(args: argparse.Namespace) -> int:
    from kernelladder.app.headless import HeadlessView
    from kernelladder.engine import events as ev
    from kernelladder.engine import summarize

    interactive = sys.stdin.isatty()
    # detached, an attached app answers ask-gates (none is asked on stdin)
    detached = bool(getattr(args, "detached", False))
    the_run, _ = build_run(args, interactive=interactive or detached)
    progress = sys.stderr if args.json else sys.stdout
    prompt = interactive and not detached and the_run.gate_policy == "ask"
    view = HeadlessView(the_run, stream=progress, prompt_gates=prompt)
    print(f"run dir: {the_run.run_dir}", file=sys.stderr if args.json else progress, flush=True)
    state = asyncio.run(drive(the_run, view))
    if args.json:
        sys.stdout.write(json.dumps(summarize(state)) + "\n")
        sys.stdout.flush()
    else:
        from kernelladder.app.verdict_report import end_of_run_lines

        for line in end_of_run_lines(the_run.run_dir, state):
            print(line, file=progress, flush=True)
        print(f"log: {the_run.run_dir / 'events.jsonl'}", file=progress, flush=True)
    if the_run.internal_error is not None:
        err = the_run.internal_error
        print(f"kernelladder: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    if state.finish_reason == ev.RULE_ERROR:
        print(f"kernelladder: the run ended on an error: {state.finish_detail}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
