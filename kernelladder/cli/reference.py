"""The CLI reference, docs/CLI.md, written from the argparse parsers themselves.

    python3 -m kernelladder.cli.reference --write   # regenerate docs/CLI.md
    python3 -m kernelladder.cli.reference           # print it
    python3 -m kernelladder.cli.reference --check   # exit 1 when docs/CLI.md is stale

A flag added to a parser reaches the reference by regenerating it; a test fails while
the committed file and the parsers disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "CLI.md"
REGENERATE = "python3 -m kernelladder.cli.reference --write"
WIDTH = 96  # usage lines are wrapped here, whatever the terminal's width

HEADER = f"""# Command-line reference

Every command and flag of `kernelladder` and `kernelladder-tui`, written from the argparse
parsers (`kernelladder/cli/`). Do not edit by hand: after changing a parser, run

    {REGENERATE}

(a test fails while this file and the parsers disagree). `--help` on any command prints
the same.
"""


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _flags(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return parser._get_formatter()._format_action_invocation(action)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    text = formatter._expand_help(action) if action.help else ""
    text = " ".join(text.split())
    notes = []
    shows_choices = "{" in parser._get_formatter()._format_action_invocation(action)
    if action.choices is not None and not shows_choices:
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    default = action.default
    if (
        action.option_strings
        and action.nargs != 0
        and default not in (None, argparse.SUPPRESS, [], "")
        and "default" not in text
    ):
        notes.append(f"default `{default}`")
    if notes:
        text = f"{text} ({'; '.join(notes)})" if text else "; ".join(notes)
    return text


def _section(parser: argparse.ArgumentParser, title: str) -> list[str]:
    lines = [f"## `{title}`", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    lines += ["```", _usage(parser), "```", ""]
    subcommands: list[tuple[str, argparse.ArgumentParser]] = []
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                subcommands += list(action.choices.items())
                for choice in action._choices_actions:
                    rows.append(f"- `{choice.dest}`: {' '.join((choice.help or '').split())}")
                continue
            help_text = _help(parser, action)
            rows.append(f"- `{_flags(parser, action)}`" + (f": {help_text}" if help_text else ""))
        if rows:
            lines += [f"**{group.title}**", "", *rows, ""]
    for name, sub in subcommands:
        lines += _section(sub, f"{parser.prog} {name}")
    return lines


def render() -> str:
    from kernelladder.cli import build_parser
    from kernelladder.cli.tui import build_parser as build_tui_parser

    lines = [HEADER]
    lines += _section(build_parser(), "kernelladder")
    lines += _section(build_tui_parser(), "kernelladder-tui")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kernelladder.cli.reference")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {DOC.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {DOC.name} is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC.write_text(text)
        return 0
    if args.check:
        if DOC.exists() and DOC.read_text() == text:
            return 0
        print(f"{DOC} is out of date with the parsers: run `{REGENERATE}`", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
