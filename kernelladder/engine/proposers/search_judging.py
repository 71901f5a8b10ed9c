"""How the search judges its trials: their merit by the run's rule, the best of a branch,
which shapes hold a kernel back, and whether a failure or a profile asks for fewer
resources."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kernelladder.engine.proposers.search_memory import FAIL, PASS, Trial
from kernelladder.engine.record import standing_rank
from kernelladder.ops.family import FOCUS_LARGE, FOCUS_SMALL
from kernelladder.verifier.contract.verdict import ShapeTiming, fastest_baseline

# Gates whose failure usually means the kernel asked for too much (shared memory,
# registers, compile time): move resource-hungry parameters down first.
RESOURCE_GATES = frozenset({"load", "crash", "timeout"})
_RESOURCE_WORDS = ("out of resource", "shared memory", "registers", "too many resources")
LARGE_FLOOR_TARGET = 0.9  # below this fraction of the floor on the largest shape: focus there

_TIMING_FIELDS = frozenset(ShapeTiming.__dataclass_fields__)


def merit(trial: Trial) -> standing_rank.Merit:
    """The trial's merit by the run's one rule (standing_rank): slower than the fastest
    baseline at no shape first, then vs best, then the floor fraction; the reference
    speedup where the verdict has no per-shape times (the history carries only that)."""
    timings = tuple(
        ShapeTiming(**{k: v for k, v in t.items() if k in _TIMING_FIELDS})
        for t in trial.timings
        if "label" in t
    )
    return standing_rank.merit_from_timings(
        timings, speedup=trial.speedup, floor_fraction=trial.floor_fraction, noise=None
    )


def score(trial: Trial) -> float | None:
    """vs best: the geomean over shapes of the fastest library time over the candidate's
    (the back-to-back rounds' ratio where they ran), when the verdict's per-shape times
    are known; else the same against the reference's time."""
    vs = merit(trial).vs_best
    if vs is not None:
        return vs
    ratios = []
    for t in trial.timings:
        cand = t.get("candidate_ms")
        if not isinstance(cand, (int, float)) or cand <= 0:
            continue
        ref = _rival_ms(t)
        if isinstance(ref, (int, float)) and ref > 0:
            ratios.append(math.log(ref / cand))
    return math.exp(sum(ratios) / len(ratios)) if ratios else None


def _rival_ms(t: Mapping[str, Any]) -> Any:
    """The time a shape's candidate is measured against: the fastest library baseline
    that ran, else the reference's (as recorded: may be missing)."""
    fastest = fastest_baseline(t.get("baselines_ms") or {})
    return fastest[1] if fastest else t.get("reference_ms")


def better(a: Trial, b: Trial) -> bool:
    """Does a rank above b by the run's rule (see merit)? Ties keep the earlier trial."""
    ma, mb = merit(a), merit(b)
    if standing_rank.better(ma, mb):
        return True
    if standing_rank.better(mb, ma):
        return False
    return (ma.speedup is not None or ma.vs_best is not None) and a.order < b.order


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    passed = sorted((t for t in trials if t.status == PASS), key=lambda t: t.order)
    if not passed:
        return None
    best = passed[0]
    for t in passed[1:]:
        if better(t, best):
            best = t
    return best


def held_back_by(trial: Trial | None) -> str | None:
    """Which shapes hold the candidate back: "large" (floor not reached on the largest
    shape) or "small" (a smaller shape is the one slowest against the best baseline)."""
    if trial is None or not trial.timings:
        return None
    timed = [t for t in trial.timings if t.get("candidate_ms")]
    if not timed:
        return None
    largest = max(timed, key=lambda t: t.get("floor_ms") or t.get("reference_ms") or 0.0)
    if (largest.get("floor_fraction") or 0.0) < LARGE_FLOOR_TARGET:
        return FOCUS_LARGE

    def against_best(t: Mapping[str, Any]) -> float:
        return (_rival_ms(t) or t["candidate_ms"]) / t["candidate_ms"]

    worst = min(timed, key=against_best)
    if against_best(worst) >= 1.0:
        return None
    return FOCUS_LARGE if worst is largest else FOCUS_SMALL


def resource_trouble(trial: Trial | None) -> bool:
    if trial is None or trial.status != FAIL:
        return False
    detail = trial.detail.lower()
    return trial.gate in RESOURCE_GATES or any(w in detail for w in _RESOURCE_WORDS)


LOW_OCCUPANCY_PCT = 30.0  # achieved occupancy below this: fewer registers/warps first


def low_occupancy(profile: Mapping[str, Any] | None) -> bool:
    """A profile whose achieved occupancy is low: the kernel asks for too many registers,
    warps or shared memory per block."""
    pct = (profile or {}).get("achieved_occupancy_pct")
    return isinstance(pct, (int, float)) and pct < LOW_OCCUPANCY_PCT
