"""The one reader of a person's hints, with the op's vocabulary: its search families and
their parameters' values (engine/run/directives.py says what a directive is). The hints
editor, the steering commands (which refuse a text with a line not understood, and
re-check the pending gates after an edit), the search proposer and the CLI's --hints
all read hints here, so a line the editor rejects has no effect anywhere.

An op without search templates (a workspace, a KernelBench problem) has no vocabulary:
its directives are read by their form alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.run.directives import (
    FREE_TEXT,
    Directives,
    NotUnderstood,
    parse_directives,
)


@dataclass(frozen=True)
class HintVocabulary:
    """The family names and PARAM -> values a hint may name (empty: any, by form)."""

    families: tuple[str, ...] = ()
    params: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)


NO_VOCABULARY = HintVocabulary()


def vocabulary_of(families: Sequence[Any]) -> HintVocabulary:
    """The vocabulary of a list of search families (ops/family.py: Family)."""
    params: dict[str, list[Any]] = {}
    for f in families:
        for p in f.params:
            values = params.setdefault(p.name, [])
            values += [v for v in p.values if v not in values]
    return HintVocabulary(tuple(f.name for f in families), {k: tuple(v) for k, v in params.items()})


def op_vocabulary(op: str, kind: str = "builtin") -> HintVocabulary:
    """The vocabulary of a run's op: its search families' (the same the search reads)."""
    if kind != "builtin":
        return NO_VOCABULARY
    from kernelladder.ops.registry import catalog

    families = catalog().get(op)
    return vocabulary_of(families) if families else NO_VOCABULARY


def read_hints(text: str, vocabulary: HintVocabulary) -> Directives:
    """The directives of a hints text, each checked against the vocabulary."""
    if not vocabulary.families:
        return parse_directives(text)
    return parse_directives(text, families=vocabulary.families, params=vocabulary.params)


def not_understood(directives: Directives) -> tuple[NotUnderstood, ...]:
    """The lines that start like a directive and are not one (free text is fine)."""
    return tuple(n for n in directives.not_understood if n.why != FREE_TEXT)


def refusal(text: str, vocabulary: HintVocabulary) -> str | None:
    """Why a hints text cannot be applied (its first line not understood), or None."""
    wrong = not_understood(read_hints(text, vocabulary))
    if not wrong:
        return None
    more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
    return f"not understood: {wrong[0].line} ({wrong[0].why}){more}"
