"""A run's options are declared once (engine/options.py RUN_OPTIONS), and read from there:
every command that takes them has each flag with its declared help and choices, each
flag's text reaches its RunOptions field, a resume changes exactly the options declared
resumable (the command line and the engine agree, naming the flag), and a run started
in the background gets the run's options only, not the app's."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any

import pytest
from helpers import ScriptedProposer, ScriptedRunner, make_run

from kernelladder.cli import UsageError, build_parser
from kernelladder.cli.run_arguments import options_from_args, resume_overrides
from kernelladder.cli.tui import build_parser as build_tui_parser
from kernelladder.engine.run.options import (
    COUNT,
    INTEGER,
    NON_NEGATIVE,
    OPTIMIZE,
    POSITIVE,
    RESUMABLE_OPTIONS,
    RUN_OPTIONS,
    SERVE,
    TUI,
    RunOption,
    RunOptions,
)
from kernelladder.engine.run.setup import resume_run

AS_GIVEN = [o for o in RUN_OPTIONS if o.as_given]
# flags a run option needs beside it to be accepted at all (they check each other)
COMPANIONS = {
    "base_url": ["--proposer", "openai"],
    "price_in": ["--proposer", "openai", "--price-out", "1"],
    "price_out": ["--proposer", "openai", "--price-in", "1"],
    "request_timeout_s": ["--proposer", "api"],
}


def _words_and_value(option: RunOption) -> tuple[list[str], Any]:
    """A command line giving `option` a value other than its default, and that value."""
    if option.reads.switch is not None:
        return [str(option.flag)], option.reads.switch
    if option.choices:
        value = next(c for c in option.choices if c != option.default)
        return [str(option.flag), value], value
    text, value = {
        COUNT.name: ("7", 7),
        INTEGER.name: ("3", 3),
        POSITIVE.name: ("2.5", 2.5),
        NON_NEGATIVE.name: ("1.5", 1.5),
    }.get(option.reads.name, ("some/where", "some/where"))
    return [str(option.flag), text], value


def _command_parsers() -> dict[str, argparse.ArgumentParser]:
    main = build_parser()
    sub = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction))
    return {OPTIMIZE: sub.choices["optimize"], SERVE: sub.choices["serve"], TUI: build_tui_parser()}


def _parse(*words: str) -> argparse.Namespace:
    return build_parser().parse_args(["optimize", *words])


def test_run_options_has_a_field_per_declared_option_with_its_default():
    declared = [o for o in RUN_OPTIONS if o.field is not None]
    assert [f.name for f in fields(RunOptions)] == [o.field for o in declared]
    plain = RunOptions(op="rmsnorm")
    for option in declared[1:]:
        default = option.default() if callable(option.default) else option.default
        assert getattr(plain, option.field) == default, option.field
    assert declared[0].field == "op" and declared[0].default is MISSING


@pytest.mark.parametrize("command", [OPTIMIZE, TUI, SERVE])
def test_each_command_takes_the_options_declared_for_it_with_their_help(command):
    parser = _command_parsers()[command]
    actions = {a.option_strings[-1]: a for a in parser._actions if a.option_strings}
    flagged = [o for o in RUN_OPTIONS if o.flag is not None]
    assert flagged and all(command in o.commands for o in flagged)  # every run command today
    for option in flagged:
        action = actions[option.flag]
        assert action.help == option.help_text, option.flag
        assert tuple(action.choices or ()) == option.choices, option.flag
        assert action.metavar == option.metavar, option.flag
    assert "(default 40)" in actions["--max-attempts"].help  # the declared default, shown


@pytest.mark.parametrize("option", AS_GIVEN, ids=lambda o: o.flag)
def test_each_flag_reaches_its_run_options_field(option):
    words, value = _words_and_value(option)
    options = options_from_args(_parse("rmsnorm", *words, *COMPANIONS.get(option.field, [])))
    assert getattr(options, str(option.field)) == value


@pytest.mark.parametrize("option", AS_GIVEN, ids=lambda o: o.flag)
def test_a_resume_changes_the_resumable_options_and_refuses_the_others(option):
    words, value = _words_and_value(option)
    args = _parse("--resume", "some/run", *words)
    recorded = RunOptions(op="rmsnorm").to_dict()
    if option.field == "run_dir":
        with pytest.raises(UsageError, match="--run-dir and --resume do not go together"):
            resume_overrides(args, recorded)
    elif option.resumable:
        assert resume_overrides(args, recorded) == {option.field: value}
    else:
        with pytest.raises(UsageError, match=f"^{option.flag} cannot change on resume$"):
            resume_overrides(args, recorded)
        # the same value as recorded is no change
        assert resume_overrides(args, {**recorded, option.field: value}) == {}


async def test_the_engine_resumes_with_the_same_options_and_names_the_flag_it_refuses(tmp_path):
    run, _, _ = make_run(tmp_path, [])
    await run.run()  # nothing to propose: it ends, and lets go of its log
    overrides = {}
    for option in AS_GIVEN:
        _, value = _words_and_value(option)
        if option.resumable:
            overrides[option.field] = value
        else:
            with pytest.raises(ValueError, match=f"^{option.flag} cannot change on resume$"):
                resume_run(
                    run.run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]),
                    overrides={option.field: value},
                )  # fmt: skip
    # what the command line composes itself: the hints file's text, the Ray cluster's
    overrides.update(hints="a hint", ray_address="auto", ray_slots=2)
    assert sorted(overrides) == sorted(RESUMABLE_OPTIONS)
    resumed = resume_run(
        run.run_dir, runner=ScriptedRunner(), proposer=ScriptedProposer([]), overrides=overrides
    )
    assert {name: getattr(resumed.options, name) for name in overrides} == overrides


def test_a_run_started_in_the_background_gets_the_run_options_only(monkeypatch, tmp_path, capsys):
    """`kernelladder-tui OP --detach`: the background `kernelladder optimize` gets the run's
    options, however the app's own were spelled (here --theme abbreviated, as argparse
    allows). start_detached is replaced by a recorder: the command line is what is under
    test, not the background process (the CLI tests start real ones)."""
    from kernelladder.app import attach
    from kernelladder.cli import tui

    passed: list[list[str]] = []

    def start_detached(optimize_args, run_dir, *, new_run):
        passed.append(list(optimize_args))
        raise attach.AttachError("recorded, not started")

    monkeypatch.setattr(attach, "start_detached", start_detached)
    run_dir = str(tmp_path / "run")
    argv = ["rmsnorm", "--detach", "--them", "kernelladder-light", "--device", "cpu"]
    argv += ["--max-attempts", "2", "--no-confirm", "--ssh-key", "k", "--run-dir", run_dir]
    assert tui.main(argv) == 2
    assert "recorded, not started" in capsys.readouterr().err
    args = _parse(*passed[0])  # optimize takes every word (argparse exits 2 on one it does not)
    assert (args.op, args.device, args.max_attempts, args.no_confirm) == (
        "rmsnorm",
        "cpu",
        2,
        False,
    )
    assert (args.ssh_key, args.run_dir) == ("k", run_dir)
    assert not any(word.startswith("--them") for word in passed[0])
