"""docs/CLI.md is generated from the argparse parsers; the committed file must match them,
and every flag of every parser must appear in it."""

from __future__ import annotations

import argparse

from helpers import ROOT

from kernelladder.cli import build_parser, reference
from kernelladder.cli.tui import build_parser as build_tui_parser


def test_committed_cli_reference_matches_the_parsers():
    committed = (ROOT / "docs" / "CLI.md").read_text()
    assert committed == reference.render(), (
        f"docs/CLI.md is out of date with the parsers: run `{reference.REGENERATE}`"
    )


def _all_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _all_flags(sub)
        elif action.help != argparse.SUPPRESS:
            flags.update(f for f in action.option_strings if f.startswith("--"))
    return flags


def test_reference_names_every_flag_of_every_command():
    text = reference.render()
    missing = {
        flag
        for flag in _all_flags(build_parser()) | _all_flags(build_tui_parser())
        if f"`{flag}" not in text and f", {flag}" not in text
    }
    assert not missing
    for command in ("check", "ops", "optimize", "replay", "doctor"):
        assert f"## `kernelladder {command}`" in text
    assert "## `kernelladder-tui`" in text


def test_reference_check_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "CLI.md"
    stale.write_text(reference.render().replace("--max-attempts", "--most-attempts"))
    monkeypatch.setattr(reference, "DOC", stale)
    assert reference.main(["--check"]) == 1
    assert reference.REGENERATE in capsys.readouterr().err
    assert reference.main(["--write"]) == 0
    assert reference.main(["--check"]) == 0
