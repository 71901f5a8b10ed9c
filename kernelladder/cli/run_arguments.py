"""A run's command line, built from engine.options.RUN_OPTIONS: the flags of
`kernelladder optimize`, `kernelladder-tui` and `kernelladder serve`, the RunOptions of a
new run (options_from_args) and what a resume changes (resume_overrides). Bad input is a
UsageError (one line, exit 2)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import (
    add_runner_arguments,
    ray_requested,
    ray_settings,
    remote_options,
    remote_requested,
)
from kernelladder.engine import (
    OPTIMIZE,
    REMOTE,
    RUN_OPTIONS,
    RUNNER_KINDS,
    RunOption,
    RunOptions,
    chosen_kind,
    chosen_kinds,
    run_options,
)

MODEL_PROPOSERS = ("api", "openai", "code")  # the proposers that ask a model over a network


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A declared parse for argparse: its ValueError is the one line argparse prints."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = parse.__name__
    return read


def _add(where: Any, option: RunOption) -> None:
    if option.positional:  # optional on the command line: --resume needs none
        where.add_argument(option.dest, nargs="?", metavar=option.metavar, help=option.help_text)
        return
    kwargs: dict[str, Any] = {"default": None, "help": option.help_text}
    if option.reads.switch is not None:
        kwargs.update(action="store_const", const=option.reads.switch)
    else:
        parse = option.reads.parse
        if parse is not None:
            kwargs["type"] = parse if parse is int else _argparse_type(parse)
        if option.choices:
            kwargs["choices"] = option.choices
        if option.metavar:
            kwargs["metavar"] = option.metavar
    where.add_argument(option.flag, **kwargs)


def add_run_arguments(parser: argparse.ArgumentParser, command: str = OPTIMIZE) -> None:
    """The options of a run that `command` takes, in their declared order (None: not
    given, so a resume can tell what was)."""
    groups: dict[str, Any] = {"": parser}
    for option in run_options(command):
        if option.group == REMOTE:  # --remote, the SSH settings, --sandbox: as `check` has them
            if REMOTE not in groups:
                add_runner_arguments(parser)
                groups[REMOTE] = None
            continue
        if option.group not in groups:
            groups[option.group] = parser.add_argument_group(option.group)
        if option.flag is not None or option.positional:
            _add(groups[option.group], option)


def optimize_argv(args: argparse.Namespace) -> list[str]:
    """`kernelladder optimize`'s command line for the run options `args` holds, for a run
    started in the background (`kernelladder-tui --detach`, `kernelladder serve OP`): each
    one that differs from its default, as given; the command's own flags left out."""
    parser = argparse.ArgumentParser(add_help=False)
    add_run_arguments(parser, OPTIMIZE)
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


def _given(args: argparse.Namespace) -> dict[str, tuple[RunOption, Any]]:
    """The options given as they are (RunOption.as_given), by field, with their value."""
    found = {}
    for option in RUN_OPTIONS:
        value = getattr(args, option.dest, None)
        if option.as_given and value is not None:
            found[str(option.field)] = (option, value)
    return found


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """RunOptions for a new run; UsageError for bad combinations."""
    if not args.op:
        raise UsageError("optimize needs an OP (or --resume DIR)")
    given: dict[str, Any] = {name: value for name, (_, value) in _given(args).items()}
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
    if remote_requested(args):
        given["remote"] = True
        given["remote_config"] = remote_options(args)
    if ray_requested(args):
        given["ray_address"], given["ray_slots"] = ray_settings(args)
    if getattr(args, "runner", None) is not None:
        given["runner"] = args.runner

    _check_priced_budget(given)
    options = RunOptions(op=args.op, **given)
    kinds = chosen_kinds(options)
    if len(kinds) > 1:
        raise UsageError(f"{kinds[0].ask} and {kinds[1].ask} do not go together")
    kind = kinds[0] if kinds else None
    runner = given.get("runner")
    if runner is not None and kind is not None and runner != kind.name:  # --runner local --remote
        raise UsageError(f"--runner {runner} and {kind.ask} do not go together")
    _check_runner_flags(given, kind)
    if given.get("keep_workers_s") and kind is not None and kind.elsewhere:
        elsewhere = " or ".join(k.ask for k in RUNNER_KINDS if k.elsewhere)
        raise UsageError(f"--keep-workers applies to local runs (not {elsewhere})")
    return options


def _check_runner_flags(given: dict[str, Any], kind: Any) -> None:
    """A runner's own flag given for a run on another runner: one line, not ignored."""
    for other in RUNNER_KINDS:
        if other is kind:
            continue
        for option in other.rows:
            if option.as_given and option.field in given:
                raise UsageError(f"{option.flag} goes with {other.ask}")


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
    """The options given with --resume that a resume may change (RunOption.resumable);
    UsageError for one that may not and differs from the recorded run's."""
    if args.run_dir:
        raise UsageError("--run-dir and --resume do not go together")
    overrides: dict[str, Any] = {}
    for name, (option, value) in _given(args).items():
        if option.resumable:
            overrides[name] = value
        elif value != recorded.get(name):
            raise UsageError(f"{option.flag} cannot change on resume")
    if args.op and args.op != recorded.get("op"):
        raise UsageError(f"--resume continues the run of {recorded.get('op')!r}, not {args.op!r}")
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

    _check_same_runner(args, recorded, overrides)
    return overrides


def _check_same_runner(args: argparse.Namespace, recorded: dict[str, Any], overrides: Any) -> None:
    """A resume continues on the runner its run was on: --runner naming another is
    refused, and so is another runner's own flag."""
    kind = chosen_kind(RunOptions.from_dict({"op": "", **recorded}))
    was = kind.name if kind is not None else "local"
    runner = getattr(args, "runner", None)
    if runner is not None and runner != was:
        raise UsageError(f"--runner {runner} cannot change on resume (the run was on {was})")
    _check_runner_flags(overrides, kind)
