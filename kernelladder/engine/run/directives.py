"""Hint directives: the lines of a person's hints that the search proposer obeys.

One directive a line (the verb, then one name or one PARAM=VALUE), case-insensitive
verbs; anything else, a sentence that starts with a verb too, is free text (which model
proposers read as written; the search proposer reads only directives):

    prefer FAMILY        move the branch to this family and keep it there
    avoid FAMILY         never propose this family
    fix PARAM=VALUE      every proposal sets PARAM to VALUE
    avoid PARAM=VALUE    no proposal sets PARAM to VALUE
    try PARAM=VALUE      the next proposal of each branch tries PARAM=VALUE first

An empty value is written `PARAM=` or `PARAM=""`. Pure functions, no I/O: the engine's
search applies the result, the app's hints editor shows it back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PREFER, AVOID, FIX, TRY = "prefer", "avoid", "fix", "try"
VERBS = (PREFER, AVOID, FIX, TRY)
FREE_TEXT = "free text"
SEARCH_READS_ONLY_DIRECTIVES = (
    "the search proposer reads only directives; free text goes to model proposers"
)
SYNTAX = "prefer FAMILY · avoid FAMILY · fix PARAM=VALUE · avoid PARAM=VALUE · try PARAM=VALUE"

_LINE = re.compile(r"^(?P<verb>[A-Za-z]+)\s+(?P<rest>.+)$")
_ASSIGN = re.compile(r"^(?P<param>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>\S*)$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.#-]*$")


@dataclass(frozen=True)
class Directive:
    verb: str  # prefer | avoid | fix | try
    line: str  # as the person wrote it
    family: str | None = None  # prefer/avoid FAMILY
    param: str | None = None  # fix/avoid/try PARAM=VALUE
    value: str | None = None  # the value as text ("" for an empty value)

    def describe(self) -> str:
        if self.family is not None:
            return f"{self.verb} {self.family}"
        return f"{self.verb} {self.param}={self.value}"


@dataclass(frozen=True)
class NotUnderstood:
    line: str
    why: str  # FREE_TEXT, or what is wrong with a line that starts like a directive


@dataclass(frozen=True)
class Directives:
    understood: tuple[Directive, ...] = ()
    not_understood: tuple[NotUnderstood, ...] = ()

    @property
    def preferred_families(self) -> tuple[str, ...]:
        return tuple(d.family for d in self.understood if d.verb == PREFER and d.family)

    @property
    def avoided_families(self) -> frozenset[str]:
        return frozenset(d.family for d in self.understood if d.verb == AVOID and d.family)

    @property
    def fixed(self) -> dict[str, str]:
        """PARAM -> VALUE; a later fix of the same parameter wins."""
        return {d.param: d.value for d in self.understood if d.verb == FIX and d.param}  # type: ignore[misc]

    @property
    def avoided_values(self) -> frozenset[tuple[str, str]]:
        return frozenset(
            (d.param, d.value)  # type: ignore[misc]
            for d in self.understood
            if d.verb == AVOID and d.param is not None
        )

    @property
    def tries(self) -> tuple[tuple[str, str], ...]:
        return tuple((d.param, d.value) for d in self.understood if d.verb == TRY and d.param)  # type: ignore[misc]

    @property
    def free_text(self) -> tuple[str, ...]:
        return tuple(n.line for n in self.not_understood if n.why == FREE_TEXT)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def value_text(value: Any) -> str:
    """How a grid value is written in a directive (booleans as True/False)."""
    return str(value)


def matches(value: Any, text: str) -> bool:
    """Does a grid value equal a directive's VALUE (case-insensitive, "" for empty)?"""
    return value_text(value).lower() == text.lower()


def parse_directives(
    text: str,
    *,
    families: Iterable[str] | None = None,
    params: Mapping[str, Sequence[Any]] | None = None,
) -> Directives:
    """The directives in a hints text and the lines that are not directives. With
    `families` and `params` (PARAM -> its values) known, a directive naming something
    the op does not have is not understood, with the reason."""
    known_families = {f.lower(): f for f in families} if families is not None else None
    known_params = {p.upper(): p for p in params} if params is not None else None
    understood: list[Directive] = []
    rejected: list[NotUnderstood] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        verb = m.group("verb").lower() if m else ""
        if verb not in VERBS:
            rejected.append(NotUnderstood(line, FREE_TEXT))
            continue
        rest = m.group("rest").strip()  # type: ignore[union-attr]
        assign = _ASSIGN.match(rest)
        if not assign and len(rest.split()) > 1:
            # a sentence that starts with a verb ("prefer fewer rows when M is small")
            rejected.append(NotUnderstood(line, FREE_TEXT))
            continue
        if assign:
            if verb == PREFER:
                rejected.append(NotUnderstood(line, "prefer takes a family, not PARAM=VALUE"))
                continue
            param = assign.group("param").upper()
            value = _unquote(assign.group("value"))
            if known_params is not None:
                if param not in known_params:
                    rejected.append(NotUnderstood(line, f"no parameter {param} for this op"))
                    continue
                param = known_params[param]
                values = params[param]  # type: ignore[index]
                hit = next((v for v in values if matches(v, value)), None)
                if hit is None:
                    shown = ", ".join(value_text(v) or '""' for v in values)
                    rejected.append(NotUnderstood(line, f"{param} takes one of {shown}"))
                    continue
                value = value_text(hit)
            understood.append(Directive(verb, line, param=param, value=value))
            continue
        if verb in (FIX, TRY):
            rejected.append(NotUnderstood(line, f"{verb} takes PARAM=VALUE"))
            continue
        if not _NAME.match(rest):
            rejected.append(NotUnderstood(line, f"{verb} takes a family name"))
            continue
        family = rest.lower()
        if known_families is not None:
            if family not in known_families:
                shown = ", ".join(sorted(known_families.values()))
                rejected.append(NotUnderstood(line, f"no family {rest}; this op has {shown}"))
                continue
            family = known_families[family]
        understood.append(Directive(verb, line, family=family))
    return Directives(tuple(understood), tuple(rejected))


def directive_lines(directives: Directives, *, reads_only_directives: bool) -> list[str]:
    """What a person is shown about their hints: each directive understood, each line not
    understood with why, and (for the search proposer) that free text is not read."""
    out = [f"understood: {d.describe()}" for d in directives.understood]
    for n in directives.not_understood:
        if n.why != FREE_TEXT:
            out.append(f"not understood: {n.line} ({n.why})")
    if directives.free_text:
        count = len(directives.free_text)
        out.append(f"free text: {count} line{'s' if count != 1 else ''}")
        if reads_only_directives:
            out.append(SEARCH_READS_ONLY_DIRECTIVES)
    return out
