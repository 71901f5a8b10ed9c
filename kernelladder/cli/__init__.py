"""Entry points: `kernelladder SUBCOMMAND ...` and `kernelladder-tui ...`.

Each subcommand lives in its own module exposing `add_parser(subparsers)` and
`run(args) -> int`; modules are imported lazily so `kernelladder check` never pays for
textual or the engine.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand -> module under kernelladder.cli
SUBCOMMANDS: dict[str, str] = {
    "check": "check",
    "ops": "ops",
    "optimize": "optimize",
    "replay": "replay",
    "deploy": "deploy",
    "doctor": "doctor",
    "serve": "serve",
}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that exits 2 with one clear line (no usage dump, no traceback)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="kernelladder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for module in SUBCOMMANDS.values():
        try:
            mod = importlib.import_module(f"kernelladder.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kernelladder.cli.{module}":
                continue  # not built yet
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from kernelladder.cli.common import apply_sandbox_choice

    apply_sandbox_choice(args)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"kernelladder: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelladder: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader left; say nothing more
        stdout_to_devnull()
        return 1


def stdout_to_devnull() -> None:
    """After a broken pipe: what is still buffered for stdout goes nowhere (else the
    interpreter's final flush prints a BrokenPipeError of its own)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file here
        pass


def tui_main(argv: list[str] | None = None) -> int:
    from kernelladder.cli import tui

    return tui.main(argv)


if __name__ == "__main__":
    sys.exit(main())
