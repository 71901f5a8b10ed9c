"""How one option of a run is declared: RunOption (its field, flag, help, reading, whether
a resume may change it) and the Readings of a flag's text. Plain data that imports
nothing of the engine: run/options.py (the run's own rows) and each runner's folder
(runners/NAME/__init__.py, its rows) import it without importing each other."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import Any

# the commands that take a run's options
OPTIMIZE, TUI, SERVE = "optimize", "kernelladder-tui", "serve"
RUN_COMMANDS = frozenset({OPTIMIZE, TUI, SERVE})


def _number(kind: type, text: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    # nan/inf would pass `> 0` or never trip a limit, and reach the log as non-standard JSON
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number: {text!r}")
    return value


def positive_int(text: str) -> int:
    value = _number(int, text)
    if not value > 0:
        raise ValueError(f"must be positive: {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _number(float, text)
    if not value > 0:
        raise ValueError(f"must be positive: {text!r}")
    return value


def non_negative(text: str) -> float:
    value = _number(float, text)
    if value < 0:
        raise ValueError(f"must not be negative: {text!r}")
    return value


@dataclass(frozen=True)
class Reading:
    """How a flag's text becomes a value: the field's type and the parse (None: the text
    as given; a parse raises ValueError with one line)."""

    name: str
    type: str  # the RunOptions field's annotation (None added when the default is None)
    parse: Callable[[str], Any] | None = None
    switch: Any = None  # a flag without a value: what giving it sets (True, or False)


TEXT = Reading("text", "str")
INTEGER = Reading("integer", "int", int)
COUNT = Reading("count", "int", positive_int)  # a positive whole number
POSITIVE = Reading("positive", "float", positive_float)  # finite, above 0 (seconds, speedups)
NON_NEGATIVE = Reading("non-negative", "float", non_negative)  # 0 or more (dollars, thresholds)
ON = Reading("on", "bool", switch=True)  # --remote: giving it turns the field on
OFF = Reading("off", "bool", switch=False)  # --no-confirm: giving it turns the field off
FILE = Reading("file", "str")  # the flag names a file; the field holds its text (--hints)


@dataclass(frozen=True)
class RunOption:
    """One option of a run, declared once."""

    field: str | None  # the RunOptions field; None: a flag of the session only (--resume)
    flag: str | None  # the command-line flag; None: positional (op), or no flag of its own
    help: str = ""  # "{default}" stands for the default
    default: Any = None  # MISSING: required (op)
    reads: Reading = TEXT
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    resumable: bool = False  # a resume may change it (RunReopened records the change)
    group: str = ""  # its section of --help: "" the command's own, or a runner's title
    commands: frozenset[str] = RUN_COMMANDS
    may_be_off: bool = False  # None is a value too, beside the default: off (stagnation)
    # the command line composes its value (--remote and the SSH settings, --runner, the
    # Ray settings): not taken as given (as_given)
    composed: bool = False

    @property
    def dest(self) -> str:
        """Its name on the parsed command line: the flag's, as argparse makes it."""
        return self.flag.lstrip("-").replace("-", "_") if self.flag else str(self.field)

    @property
    def positional(self) -> bool:
        """The one required field (op) is given by position."""
        return self.flag is None and self.default is MISSING

    @property
    def help_text(self) -> str:
        shown = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return self.help.replace("{default}", shown)

    @property
    def as_given(self) -> bool:
        """A field whose flag's value is the field's value as given: what a new run takes
        as it is, and what a resume changes (resumable) or refuses to (fixed): a runner's
        plain flags too. The others are composed by the command line: op, the hints file,
        the SSH and Ray settings, --runner."""
        return (
            self.field is not None
            and self.flag is not None
            and not self.composed
            and self.reads is not FILE
        )
