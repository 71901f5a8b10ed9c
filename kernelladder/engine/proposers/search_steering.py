"""What the person has said to the search about a branch, read afresh from each proposal's
context (so a resume keeps it): the families vetoed there, the hint directives
(engine/run/directives.py), the families its line may not change to (engine/run/branch_line.py),
and whether the branch is due a change of family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kernelladder.engine.protocols import ProposalContext
from kernelladder.engine.run.directives import Directives
from kernelladder.engine.run.hints import read_hints, vocabulary_of
from kernelladder.ops.family import Family


@dataclass(frozen=True)
class Steering:
    """What the person has said about this branch: vetoes (folded branch state) and the
    hint directives."""

    closed: frozenset[str] = frozenset()  # families vetoed here or avoided
    preferred: tuple[str, ...] = ()
    fixed: Mapping[str, str] = field(default_factory=dict)
    avoided_values: frozenset[tuple[str, str]] = frozenset()
    tries: tuple[tuple[str, str], ...] = ()
    stagnated: int | None = None  # attempts without a gain, when a family change is due
    measured: bool = True  # speed is measured (a GPU): "stagnated" counts attempts without a gain
    # families the branch's line may not change to (another live branch's line, one it
    # left): only a family the person prefers goes there
    taken: frozenset[str] = frozenset()


def steering(ctx: ProposalContext, families: Sequence[Family]) -> Steering:
    d: Directives = read_hints(ctx.hints or "", vocabulary_of(families))
    closed = frozenset(ctx.vetoed_families) | d.avoided_families
    preferred = tuple(dict.fromkeys(f for f in d.preferred_families if f not in closed))
    return Steering(
        closed=closed,
        preferred=preferred,
        fixed=d.fixed,
        avoided_values=d.avoided_values,
        tries=d.tries,
        stagnated=_stagnated(ctx),
        measured=str(ctx.device or "").startswith("cuda"),
        taken=frozenset(ctx.closed_families) - closed,
    )


def _stagnated(ctx: ProposalContext) -> int | None:
    """The branch's attempts without a gain when it has gone half its stagnation limit
    without one, and as long again since its last family change was offered. Without
    speed (the CPU interpreter) a line gains once, by its first passing kernel (the fold's
    rule), so there this counts the attempts of its line after that one."""
    limit = ctx.stagnation_limit
    if not limit or limit < 2:
        return None
    threshold = max(1, limit // 2)
    if ctx.stagnation < threshold:
        return None
    since = 0
    for entry in ctx.history:
        if not isinstance(entry, Mapping):
            continue
        meta = entry.get("meta") if isinstance(entry.get("meta"), Mapping) else {}
        if meta.get("from_family"):
            since = 0
        elif entry.get("verdict") is not None:
            since += 1
    if since < threshold:
        return None
    return ctx.stagnation
