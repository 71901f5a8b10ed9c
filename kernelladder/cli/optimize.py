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
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import (
    add_ray_arguments,
    add_runner_arguments,
    ray_requested,
    ray_settings,
    remote_options,
    remote_requested,
    require_local_gpu,
)
from kernelladder.engine import DEFAULT_KEEP_WORKERS_S, KEEP_WORKERS_ENV, VERIFY_MODES

EXIT_OK, EXIT_FAILURE = 0, 1
MODEL_PROPOSERS = ("api", "openai", "code")  # the proposers that ask a model over a network

# flag dest -> RunOptions field, for the options a resume may change
_RESUMABLE = {
    "target": "target",
    "max_attempts": "max_attempts",
    "stagnation": "stagnation",
    "budget_usd": "budget_usd",
    "budget_tokens": "budget_tokens",
    "time_limit": "time_limit_s",
    "gate": "gate",
    "gate_timeout": "gate_timeout_s",
    "gate_timeout_policy": "gate_timeout_policy",
    "timeout": "timeout_s",
    "target_over": "target_over",
    "no_confirm": "confirm",
    "verify": "verify",
    "workers_per_gpu": "workers_per_gpu",
    "no_early_stop": "early_stop",
    "base_url": "base_url",
    "request_timeout": "request_timeout_s",
    "keep_workers": "keep_workers_s",
}
# flag dest -> RunOptions field, fixed for the life of a run
_FIXED = {
    "proposer": "proposer",
    "model": "model",
    "branches": "branches",
    "device": "device",
    "min_speedup": "min_speedup",
    "replay_from": "replay_from",
    "start": "start",
    "profile": "profile",
    "price_in": "price_in",
    "price_out": "price_out",
}


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        # nan/inf would pass `> 0` or never trip a limit, and reach the log as non-standard JSON
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run (shared with `kernelladder-tui`)."""
    p.add_argument("op", nargs="?", metavar="OP|PROBLEM.py", help="built-in op or problem file")
    p.add_argument(
        "--proposer",
        choices=("search", "tune", "api", "openai", "code", "replay"),
        default=None,
        help="who writes candidates (default: search, offline; tune for a workspace "
        "without an API key)",
    )

    p.add_argument(
        "--start",
        default=None,
        metavar="FILE",
        help="your own starting kernel: verified first as attempt #0, every branch starts from it",
    )
    p.add_argument(
        "--profile",
        choices=("auto", "off"),
        default=None,
        help="Nsight Compute profiles of the start and each new best (auto: when ncu "
        "can read the GPU's counters)",
    )

    p.add_argument("--model", default=None, help="model for the api/code/openai proposers")
    add_openai_arguments(p)
    p.add_argument(
        "--target",
        type=_positive(float),
        default=None,
        help="stop once the best reaches this speedup over the fastest library baseline "
        "(geomean over the shapes; see --target-over)",
    )

    p.add_argument(
        "--target-over",
        choices=("best", "reference"),
        default=None,
        help="what --target is a speedup over: best (default: the fastest library baseline "
        "per shape) or reference (the op's reference)",
    )
    p.add_argument(
        "--no-confirm",
        action="store_const",
        const=False,
        default=None,
        help="do not re-measure the best against the fastest baseline when the run ends",
    )
    p.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default=None,
        help="pipelined (default): each GPU's workers compile the next candidates while "
        "one is timed, correctness shares the GPU and timing has it alone; serial: one "
        "worker per GPU takes each candidate start to finish",
    )
    p.add_argument(
        "--workers-per-gpu",
        type=_positive(int),
        default=None,
        help="pipelined: workers sharing each GPU (default one per branch, at most 3)",
    )
    p.add_argument(
        "--keep-workers",
        type=_non_negative,
        default=None,
        metavar="S",
        help="local runs: keep the idle verifier workers warm S seconds after the run, for "
        f"the next run here to take (default {DEFAULT_KEEP_WORKERS_S:g} on a GPU, off on the "
        f"CPU, or {KEEP_WORKERS_ENV}; 0: shut them down; `doctor --stop-workers` stops them)",
    )
    p.add_argument(
        "--no-early-stop",
        action="store_const",
        const=False,
        default=None,
        help="time every candidate in full, also one clearly slower than its branch's best "
        "after a first look (by default that one stops early: a pass with coarse times)",
    )

    p.add_argument(
        "--max-attempts",
        type=_positive(int),
        default=None,
        help="attempts for the whole run (default 40)",
    )
    p.add_argument(
        "--branches",
        type=_positive(int),
        default=None,
        help="strategy branches at once (default 3)",
    )
    p.add_argument(
        "--stagnation",
        type=_positive(int),
        default=None,
        help="attempts without a gain before a branch stops (default 8; off for --proposer tune)",
    )
    p.add_argument("--budget-usd", type=_non_negative, default=None, help="spend at most this")
    p.add_argument(
        "--budget-tokens",
        type=_positive(int),
        default=None,
        metavar="N",
        help="use at most N tokens (input + output): the budget of a model whose cost is not known",
    )
    p.add_argument(
        "--time-limit",
        type=_positive(float),
        default=None,
        metavar="S",
        help="wall-clock budget in seconds",
    )
    p.add_argument("--hints", default=None, metavar="FILE", help="global hints for proposers")
    p.add_argument(
        "--gate",
        choices=("ask", "approve", "veto"),
        default=None,
        help="what happens to high-undo-cost moves (default ask)",
    )
    p.add_argument(
        "--gate-timeout",
        type=_positive(float),
        default=None,
        metavar="S",
        help="after S seconds an unanswered gate applies --gate-timeout-policy",
    )
    p.add_argument(
        "--gate-timeout-policy",
        choices=("approve", "veto"),
        default=None,
        help="decision when a gate times out (default veto)",
    )
    p.add_argument("--run-dir", default=None, metavar="DIR", help="default runs/<id>")
    p.add_argument("--resume", default=None, metavar="DIR", help="continue a stopped or killed run")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available"
    )
    p.add_argument(
        "--timeout",
        type=_positive(float),
        default=None,
        metavar="S",
        help="per-candidate verifier timeout (default 300)",
    )
    p.add_argument(
        "--min-speedup",
        type=_non_negative,
        default=None,
        help="speed gate threshold over the reference (default 0: a correct kernel slower "
        "than the reference passes, its standing says so)",
    )
    p.add_argument(
        "--replay-from",
        default=None,
        metavar="DIR",
        help="proposer replay: the run whose sources to re-propose",
    )
    add_runner_arguments(p)

    add_ray_arguments(p)


def add_openai_arguments(p: argparse.ArgumentParser) -> None:
    """--proposer openai: the server and the prices (docs/PROPOSERS.md)."""
    p.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="openai: an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 for vLLM "
        "(default: OPENAI_BASE_URL, else OpenAI's; key from OPENAI_API_KEY)",
    )
    p.add_argument(
        "--request-timeout",
        type=_positive(float),
        default=None,
        metavar="S",
        help="api/openai/code: seconds one request to the model may take before it is "
        "retried (default 300; code: 900)",
    )
    for side in ("in", "out"):
        p.add_argument(
            f"--price-{side}",
            type=_non_negative,
            default=None,
            metavar="USD",
            help=f"openai: USD per million {side}put tokens (both given: they price every "
            "call; else a small table of OpenAI's models, else the cost is not known)",
        )


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "optimize",
        help="run a headless optimization",
        description=__doc__.splitlines()[0],
    )
    add_run_arguments(p)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")

    p.add_argument(
        "--detached",
        action="store_true",
        help="no terminal: ask-gates wait for an app attached with kernelladder-tui --attach "
        "(kernelladder-tui --detach starts runs this way)",
    )

    p.set_defaults(func=run)


def _read_hints(path: str | None) -> str | None:
    if path is None:
        return None
    hints = Path(path)
    try:
        if hints.exists() and not hints.is_file():  # a directory, or /dev/zero read forever
            raise UsageError(f"cannot read hints file {path}: not a regular file")
        return hints.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"cannot read hints file {path}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read hints file {path}: {exc.strerror or exc}") from None


def _checked_hints(text: str | None, path: str, op: str) -> str | None:
    """Hints with a line not understood (the op's vocabulary) are refused, as the app's
    editor refuses them: such a line would have no effect anywhere."""
    from kernelladder.engine import op_vocabulary, refusal

    if text is not None and (why := refusal(text, op_vocabulary(op))):
        raise UsageError(f"hints file {path}: {why}")
    return text


def _remote(args: argparse.Namespace) -> tuple[bool, dict[str, Any]]:
    return remote_requested(args), remote_options(args)


def options_from_args(args: argparse.Namespace) -> Any:
    """RunOptions for a new run; UsageError for bad combinations."""
    from kernelladder.engine import RunOptions

    if not args.op:
        raise UsageError("optimize needs an OP (or --resume DIR)")
    given: dict[str, Any] = {}
    for dest, name in {**_RESUMABLE, **_FIXED}.items():
        value = getattr(args, dest, None)
        if value is not None:
            given[name] = value
    hints = _checked_hints(_read_hints(args.hints), args.hints, args.op)
    if hints is None and Path(args.op).is_dir():  # a workspace's HINTS.md
        path = str(Path(args.op) / "HINTS.md")
        hints = _checked_hints(_read_hints(path), path, args.op) if Path(path).is_file() else None
    if hints is not None:
        given["hints"] = hints
    if args.replay_from and given.setdefault("proposer", "replay") != "replay":
        raise UsageError("--replay-from goes with --proposer replay")
    if given.get("proposer") == "replay" and not args.replay_from:
        raise UsageError("--proposer replay needs --replay-from DIR")
    if "proposer" not in given and Path(args.op).is_dir():
        given["proposer"] = workspace_proposer()
    if given.get("proposer") == "tune":
        # the tuner is done when its space is spent (or the budget is), not after a few
        # configs without a gain: a joint search crosses flat stretches
        given.setdefault("stagnation", None)
    remote, remote_config = _remote(args)
    if remote:
        given["remote"] = True
        given["remote_config"] = remote_config
        given.setdefault("device", "cuda")

    if ray_requested(args):
        given["ray_address"], given["ray_slots"] = ray_settings(args)
        given.setdefault("device", "cpu" if given["ray_slots"] is not None else "cuda")

    if given.get("keep_workers_s") and (given.get("remote") or given.get("ray_address")):
        raise UsageError("--keep-workers applies to local runs (not --remote or --runner ray)")
    _check_priced_budget(given)
    return RunOptions(op=args.op, run_dir=args.run_dir, **given)


def unpriced_notice(options: Any) -> list[str]:
    """The run says once, at its start, that it counts tokens and not dollars."""
    if options.proposer != "openai":
        return []
    from kernelladder.engine import price_of

    if price_of(options.model, options.price_in, options.price_out) is not None:
        return []
    bound = (
        f"--budget-tokens {options.budget_tokens} bounds them"
        if options.budget_tokens
        else "--budget-tokens N would bound them"
    )
    return [
        f"cost not known for model {options.model or '(the server default)'}: tokens are "
        f"counted and the cost shows $0 ({bound}; --price-in/--price-out price them)"
    ]


def _check_priced_budget(given: dict[str, Any]) -> None:
    """--proposer openai with a model whose cost is not known: a USD budget could never
    trip (every call counts $0), so it is refused; the tokens are what can be counted."""
    priced = [f"--price-{s}" for s in ("in", "out") if given.get(f"price_{s}") is not None]
    flags = priced + (["--base-url"] if given.get("base_url") is not None else [])
    if flags and given.get("proposer") != "openai":
        raise UsageError(f"{' and '.join(flags)}: only with --proposer openai")
    if len(priced) == 1:
        raise UsageError("give both --price-in and --price-out (USD per million tokens)")
    if given.get("request_timeout_s") is not None and given.get("proposer") not in MODEL_PROPOSERS:
        raise UsageError("--request-timeout: only with --proposer api, openai or code")
    if given.get("proposer") != "openai" or given.get("budget_usd") is None:
        return
    from kernelladder.engine import price_of

    if price_of(given.get("model"), given.get("price_in"), given.get("price_out")) is None:
        raise UsageError(
            f"--budget-usd: the cost of model {given.get('model') or '(the server default)'} "
            "is not known, so only tokens are counted: give --price-in and --price-out "
            "(USD per million tokens), or a token budget with --budget-tokens N"
        )


def workspace_proposer() -> str:
    """A workspace's default proposer: api with a key configured, tune (offline) without."""
    return "api" if os.environ.get("ANTHROPIC_API_KEY") else "tune"


def resume_overrides(args: argparse.Namespace, recorded: dict[str, Any]) -> dict[str, Any]:
    """The resumable options given with --resume; UsageError for a fixed one that differs."""
    for dest, name in _FIXED.items():
        value = getattr(args, dest, None)
        if value is not None and value != recorded.get(name):
            raise UsageError(f"--{dest.replace('_', '-')} cannot change on resume")
    if args.op and args.op != recorded.get("op"):
        raise UsageError(f"--resume continues the run of {recorded.get('op')!r}, not {args.op!r}")
    if args.run_dir:
        raise UsageError("--run-dir and --resume do not go together")
    overrides = {
        name: getattr(args, dest)
        for dest, name in _RESUMABLE.items()
        if getattr(args, dest, None) is not None
    }
    hints = _checked_hints(_read_hints(args.hints), args.hints, str(recorded.get("op") or ""))
    if hints is not None:
        overrides["hints"] = hints

    if ray_requested(args):  # the cluster may have moved since: the new address applies
        if recorded.get("ray_address") is None:
            raise UsageError("--runner ray cannot change on resume (the run was not on Ray)")
        address, slots = ray_settings(args)
        overrides["ray_address"] = address
        if slots is not None:
            overrides["ray_slots"] = slots

    return overrides


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
    made or its log touched (as `check --device cuda` does); remote runs use the box's."""
    if options.ray_address is not None:
        from kernelladder.engine import MISSING_RAY, ray_installed

        if not ray_installed():
            raise UsageError(MISSING_RAY)
    elif not options.remote:
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
