"""The speed gate's back-to-back rounds: when a candidate and the fastest baseline are
close (close_rival), the two are timed back to back, the order alternating each round,
and the word per shape comes from rounds won and lost (paired_result: a sign test), not
from two medians taken minutes apart. time_rounds runs the rounds; SpeedGate._paired
(speed_gate.py) checks the candidate's timed calls around them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from kernelladder.verifier import fence
from kernelladder.verifier.verdict import fastest_baseline

# Back-to-back rounds with the fastest baseline when the two are this close (relative):
# at a hardware limit they differ by less than the drift between separate timings.
PAIRED_BAND = 0.05
PAIRED_BAND_MAX = 0.25
PAIRED_ROUNDS = 7
PAIRED_TARGET_MS = 10.0  # of trials per timing in a round


def close_rival(cand: Any, baselines: Mapping[str, float | str]) -> str | None:
    """The fastest baseline when it is within PAIRED_BAND (or twice the candidate's noise,
    up to PAIRED_BAND_MAX) of the candidate's time, else None: a wider margin needs no
    back-to-back rounds to be believed."""
    fastest = fastest_baseline(baselines)
    if fastest is None or not cand.median_ms or cand.median_ms <= 0:
        return None
    name, ms = fastest
    band = min(PAIRED_BAND_MAX, max(PAIRED_BAND, 2.0 * (cand.noise or 0.0)))
    return name if abs(ms / cand.median_ms - 1.0) <= band else None


def paired_result(rival: str, cand_ms: Sequence[float], rival_ms: Sequence[float]) -> dict:
    """Rounds won and lost, the median per-round ratio (rival / candidate), and the word:
    "faster" or "slower" only when every round went that way (a one-sided sign test,
    p = 2**-rounds: 0.008 at 7 rounds), else "tie"."""
    pairs = list(zip(cand_ms, rival_ms, strict=True))
    won = sum(1 for k, b in pairs if k < b)
    lost = sum(1 for k, b in pairs if k > b)
    rounds = len(pairs)
    word = "faster" if won == rounds else "slower" if lost == rounds else "tie"
    ratios = [b / k for k, b in pairs if k > 0]
    return {
        "baseline": rival,
        "rounds": rounds,
        "won": won,
        "lost": lost,
        "ratio": statistics.median(ratios) if ratios else math.nan,
        "candidate_ms": statistics.median(cand_ms),
        "baseline_ms": statistics.median(rival_ms),
        "verdict": word,
    }


@dataclass
class Rounds:
    """What time_rounds measured: each side's median per round, the candidate's calls and
    Triton launches while timed (to be checked), and whether the baseline failed."""

    candidate_ms: list[float] = field(default_factory=list)
    rival_ms: list[float] = field(default_factory=list)
    calls: int = 0
    launched: int = 0
    failed: bool = False


def time_rounds(
    timer: Any,
    timed: Callable[[], None],
    rival_fn: Callable[[], Any],
    rounds: int,
    library_work: Callable[[], AbstractContextManager[None]],
    last: list[Any],
    timings: list[Any] | None = None,
) -> Rounds:
    """`rounds` rounds of the candidate (`timed`, which counts its calls in last[1]) and
    the rival baseline, each timed for PAIRED_TARGET_MS, the order alternating; the
    candidate's Timings are added to `timings`. A baseline that raises ends the rounds
    (failed): its failure is not the candidate's."""
    out = Rounds()
    for r in range(rounds):
        for who in ("candidate", "rival") if r % 2 == 0 else ("rival", "candidate"):
            if who == "candidate":
                last[1] = 0
                launches0 = fence.STATE.launches
                mine = timer.time(timed, PAIRED_TARGET_MS)
                out.candidate_ms.append(mine.median_ms)
                if timings is not None:
                    timings.append(mine)
                out.launched += fence.STATE.launches - launches0
                out.calls += last[1]
                continue
            try:
                with library_work():
                    out.rival_ms.append(timer.time(rival_fn, PAIRED_TARGET_MS).median_ms)
            except Exception:
                out.failed = True
                return out
    return out
