"""Which passing attempt is best: the one rule the fold, the engine (BestImproved, branch
bests, stagnation, --target), the search proposer, the summary and replay all use.

With speed measured and a standing recorded (VerdictReady.vs_best / .standing_shapes):
an attempt slower than the fastest library baseline at no shape ranks above one that is
slower somewhere; among equals the higher geomean "vs best" (the fastest baseline's time
over the candidate's, per shape) wins; then the higher fraction of the floor.
Where an attempt has no vs best (older logs, an op with no baseline that ran) the speedup
over the op's reference decides, as it did before. Without speed (the CPU) nothing here
applies: "best" is the first passing attempt (rules.py).

"Faster" / "slower" at a shape need a difference beyond PRACTICAL_MARGIN (verdict.py)
besides the rounds' sign test. The noise that ranks (a gain beyond noise, stagnation, a
runner-up within noise) is the noise of the geomean itself (verdict.geomean_noise of the
per-shape noises), not the noisiest shape's trial spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.record.gains import MIN_NOISE
from kernelladder.verifier.contract.verdict import (
    PRACTICAL_MARGIN,
    ShapeTiming,
    geomean_noise,
    judged_word,
    standing_text,
    versus_fastest_baseline,
    vs_best,
)

TARGET_OVER = ("best", "reference")  # what --target is a speedup over


@dataclass(frozen=True)
class Merit:
    """What ranks a passing attempt."""

    speedup: float | None = None  # over the op's reference (geomean)
    vs_best: float | None = None  # over the fastest baseline per shape (geomean)
    shapes: Mapping[str, str] = field(default_factory=dict)  # label -> faster/tie/slower
    floor_fraction: float | None = None
    noise: float | None = None

    @property
    def by_standing(self) -> bool:
        return self.vs_best is not None

    @property
    def never_slower(self) -> bool:
        return "slower" not in self.shapes.values()

    def key(self) -> tuple[int, float, float]:
        return (int(self.never_slower), self.vs_best or 0.0, self.floor_fraction or 0.0)


def ranking_noise(shapes: Mapping[str, Mapping[str, Any]], noise: float | None) -> float | None:
    """The noise a standing is ranked with: the geomean's own noise from the per-shape
    noises its rows carry; `noise` (the noisiest shape's, as older logs record only
    that) where a row carries none."""
    rows = list(shapes.values())
    if rows and all(isinstance(row.get("noise"), int | float) for row in rows):
        return geomean_noise([row["noise"] for row in rows])
    return noise


def merit_of(attempt: Any) -> Merit:
    """The merit of a folded attempt (AttemptState: speedup, vs_best, standing_shapes,
    floor_fraction, noise)."""
    shapes = getattr(attempt, "standing_shapes", None) or {}
    return Merit(
        speedup=attempt.speedup,
        vs_best=getattr(attempt, "vs_best", None),
        shapes={label: str(row.get("standing", "")) for label, row in shapes.items()},
        floor_fraction=attempt.floor_fraction,
        noise=ranking_noise(shapes, attempt.noise),
    )


def judged_rows(shapes: Mapping[str, Any]) -> dict[str, Any]:
    """Recorded per-shape rows with the practical margin applied to their words (a row of
    an older log that says "slower" by 0.24 % reads "tie"); the rows are copied."""
    out: dict[str, Any] = {}
    for label, row in shapes.items():
        if isinstance(row, Mapping):
            row = dict(row)
            row["standing"] = judged_word(str(row.get("standing", "")), row.get("vs_best"))
        out[label] = row
    return out


def rows_text(shapes: Mapping[str, Any]) -> str:
    """standing_text of per-shape rows ("3 faster, 2 tie")."""
    return standing_text(
        {label: str(row.get("standing", "")) for label, row in shapes.items() if row}
    )


def standing_shapes(timings: Sequence[ShapeTiming]) -> dict[str, dict[str, Any]]:
    """Per shape label: the fastest baseline, the candidate's speedup over it, the word and
    the candidate's noise there ({"baseline", "vs_best", "standing", "noise", "rounds",
    "won", "lost"}); shapes without a baseline that ran are left out."""
    out: dict[str, dict[str, Any]] = {}
    for t in timings:
        versus = versus_fastest_baseline(t.candidate_ms, t.baselines_ms, t.noise, t.paired)
        if versus is None:
            continue
        row: dict[str, Any] = {
            "baseline": versus[0],
            "vs_best": round(float(versus[1]), 4),
            "standing": versus[2],
            "noise": None if t.noise is None else round(float(t.noise), 6),
        }
        paired = t.paired or {}
        if paired.get("baseline") == versus[0] and isinstance(paired.get("rounds"), int):
            row.update(rounds=paired["rounds"], won=paired.get("won"), lost=paired.get("lost"))
        out[t.label] = row
    return out


def merit_from_timings(
    timings: Sequence[ShapeTiming],
    *,
    speedup: float | None,
    floor_fraction: float | None,
    noise: float | None,
) -> Merit:
    """The merit of a verdict from its per-shape timings."""
    shapes = standing_shapes(timings)
    return Merit(
        speedup=speedup,
        vs_best=vs_best(timings),
        shapes={label: row["standing"] for label, row in shapes.items()},
        floor_fraction=floor_fraction,
        noise=ranking_noise(shapes, noise),
    )


def better(a: Merit, b: Merit | None) -> bool:
    """Does `a` rank strictly above `b` (None: nothing yet)?"""
    if b is None:
        return a.speedup is not None or a.vs_best is not None
    if a.by_standing and b.by_standing:
        return a.key() > b.key()
    if a.speedup is None:
        return False
    return b.speedup is None or a.speedup > b.speedup


def is_gain(reference: Merit | None, candidate: Merit) -> bool:
    """A gain beyond noise over `reference` (what resets stagnation): by standing, moving
    from slower somewhere to slower nowhere, or vs best up by more than the larger noise
    of the two (at least MIN_NOISE); otherwise the speedup over the reference, the same way."""
    if candidate.speedup is None and candidate.vs_best is None:
        return False
    if reference is None:
        return True
    margin = max(candidate.noise or 0.0, reference.noise or 0.0, MIN_NOISE)
    if candidate.by_standing and reference.by_standing:
        if candidate.never_slower != reference.never_slower:
            return candidate.never_slower
        return candidate.vs_best > reference.vs_best * (1.0 + margin)  # type: ignore[operator]
    if candidate.speedup is None:
        return False
    return reference.speedup is None or candidate.speedup > reference.speedup * (1.0 + margin)


def ties(best: Merit, other: Merit) -> bool:
    """Is `other` as good as `best` within the noise: both ranked by standing, slower
    nowhere alike, and `best` not ahead by the margin a gain must clear (is_gain: the
    larger noise of the two, at least MIN_NOISE). Which of two such is the best is the
    timing's noise deciding, not the kernels."""
    if not (best.by_standing and other.by_standing):
        return False
    return best.never_slower == other.never_slower and not is_gain(other, best)


def target_figure(merit: Merit, over: str) -> float | None:
    """The figure --target is compared with: vs best (or, where an attempt has none, the
    speedup over the reference), or with --target-over reference the reference speedup."""
    if over == "reference":
        return merit.speedup
    return merit.vs_best if merit.vs_best is not None else merit.speedup


def target_label(merit: Merit, over: str) -> str:
    return (
        "speedup over the reference" if over == "reference" or not merit.by_standing else "vs best"
    )


def best_baseline_name(shapes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The baseline an attempt is measured against: the one that is fastest at most shapes
    (a header says "1.03x vs torch.compile")."""
    names = [str(row.get("baseline")) for row in shapes.values() if row.get("baseline")]
    if not names:
        return None
    return max(dict.fromkeys(names), key=names.count)


def standing_counts(shapes: Mapping[str, Any]) -> str:
    """'3 faster 2 tie' from per-shape rows or words; '' when there are none."""
    words = [row.get("standing") if isinstance(row, Mapping) else row for row in shapes.values()]
    return " ".join(f"{words.count(w)} {w}" for w in ("faster", "tie", "slower") if w in words)


__all__ = [
    "MIN_NOISE",
    "PRACTICAL_MARGIN",
    "judged_rows",
    "ranking_noise",
    "rows_text",
    "TARGET_OVER",
    "Merit",
    "best_baseline_name",
    "better",
    "is_gain",
    "merit_from_timings",
    "merit_of",
    "standing_counts",
    "standing_shapes",
    "target_figure",
    "target_label",
]
