"""The speed gate's back-to-back rounds: when a candidate and the fastest baseline are
close (close_rival), the two are timed back to back, the order alternating each round,
and the word per shape comes from rounds won and lost (paired_result: a sign test), not
from two medians taken minutes apart. time_rounds runs the rounds; SpeedGate._paired
(speed_gate.py) checks the candidate's timed calls around them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from kernelladder.verifier.contract.verdict import beyond_margin, fastest_baseline
from kernelladder.verifier.worker import fence
from kernelladder.verifier.worker.timing import median, time_with_plan

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


def settled_word(cand_ms: Sequence[float], rival_ms: Sequence[float], rounds: int) -> str | None:
    """The word `rounds` back-to-back rounds would give (paired_result's sign test), when
    the rounds so far already decide it, else None. A tie is settled as soon as one round
    was not won and one was not lost: no later round can make every round go one way. It
    is settled too once more than half of all `rounds` rounds have their ratio within
    PRACTICAL_MARGIN: the median ratio of every round then lies within it, whatever the
    rest give (every round won by 0.4 % is a tie). "faster" and "slower" need every round,
    so only the full count settles them. The sequential stop therefore gives the fixed
    test's word on the same rounds: the same error rate, fewer rounds where a shape ties."""
    pairs = list(zip(cand_ms, rival_ms, strict=False))
    not_won = any(k >= b for k, b in pairs)
    not_lost = any(k <= b for k, b in pairs)
    if not_won and not_lost:
        return "tie"
    within = sum(1 for k, b in pairs if k > 0 and not beyond_margin(b / k))
    if within > rounds // 2:
        return "tie"
    if len(pairs) >= rounds:
        return "faster" if not not_won else "slower"
    return None


def paired_result(rival: str, cand_ms: Sequence[float], rival_ms: Sequence[float]) -> dict:
    """Rounds won and lost, the median per-round ratio (rival / candidate), and the word:
    "faster" or "slower" only when every round went that way (a one-sided sign test,
    p = 2**-rounds: 0.008 at 7 rounds) and the median ratio is beyond PRACTICAL_MARGIN,
    else "tie". The rounds' times are kept."""
    pairs = list(zip(cand_ms, rival_ms, strict=True))
    won = sum(1 for k, b in pairs if k < b)
    lost = sum(1 for k, b in pairs if k > b)
    rounds = len(pairs)
    ratios = [b / k for k, b in pairs if k > 0]
    ratio = median(ratios) if ratios else math.nan
    word = "faster" if won == rounds else "slower" if lost == rounds else "tie"
    if word != "tie" and not (math.isfinite(ratio) and beyond_margin(ratio)):
        word = "tie"  # every round one way, by less than a kernel engineer calls a difference
    return {
        "baseline": rival,
        "rounds": rounds,
        "won": won,
        "lost": lost,
        "ratio": ratio,
        "candidate_ms": median(cand_ms),
        "baseline_ms": median(rival_ms),
        "verdict": word,
        "candidate_rounds_ms": [round(float(v), 6) for v in cand_ms],
        "baseline_rounds_ms": [round(float(v), 6) for v in rival_ms],
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
    settled: Callable[[Sequence[float], Sequence[float]], bool] | None = None,
    candidate_plan: dict | None = None,
    before_rival: Callable[[], None] | None = None,
    before_candidate: Callable[[], None] | None = None,
) -> Rounds:
    """`rounds` rounds of the candidate (`timed`, which counts its calls in last[1]) and
    the rival baseline, each timed for PAIRED_TARGET_MS, the order alternating; the
    candidate's Timings are added to `timings`. A baseline that raises ends the rounds
    (failed): its failure is not the candidate's. `settled(candidate_ms, rival_ms)`, when
    given, ends them once the word can no longer change (the sequential stop).
    `candidate_plan`: the candidate's GpuTimer plan at this shape, from its first look.
    `before_rival`: called before each timing of the baseline (the audit of what the
    candidate's round may have changed; it raises to stop the rounds); `before_candidate`
    before each of the candidate's (what the baseline's round changed is not its)."""
    out = Rounds()
    # each side probed once (the GPU timer's plan), then timed round after round
    plans: dict[str, dict] = {
        "candidate": candidate_plan if candidate_plan is not None else {},
        "rival": {},
    }

    def time_one(who: str, fn: Callable[[], Any]) -> Any:
        return time_with_plan(timer, fn, PAIRED_TARGET_MS, plans[who])

    for r in range(rounds):
        for who in ("candidate", "rival") if r % 2 == 0 else ("rival", "candidate"):
            if who == "candidate":
                if before_candidate is not None:
                    before_candidate()
                last[1] = 0
                launches0 = fence.STATE.launches
                mine = time_one(who, timed)
                out.candidate_ms.append(mine.median_ms)
                if timings is not None:
                    timings.append(mine)
                out.launched += fence.STATE.launches - launches0
                out.calls += last[1]
                continue
            if before_rival is not None:
                before_rival()
            try:
                with library_work():
                    out.rival_ms.append(time_one(who, rival_fn).median_ms)
            except Exception:
                out.failed = True
                return out
        if settled is not None and settled(out.candidate_ms, out.rival_ms):
            break
    return out
