"""The end's re-measure stops a shape's back-to-back rounds once its word is settled
(speed_gate.settled_word). Checked on the rounds the H200 recorded: every paired result
in the committed runs (examples/, tests/data/h200-runs/: the searches' 7-round pairs and the
re-measures' 15-round ones), replayed round by round in many orders, gets the word the
fixed rounds gave. The saved verdicts keep rounds won and lost, not their order, so the
order is what varies; a tie needs one round not won and one not lost whatever the order."""

from __future__ import annotations

import json
import random

from helpers import ROOT

from kernelladder.verifier.contract.verdict import beyond_margin
from kernelladder.verifier.worker.speed_gate import paired_result, settled_word

MIN_ROUNDS = 5  # best_confirmation.CONFIRM_MIN_ROUNDS


def _recorded_pairs() -> list[dict]:
    found = []
    for folder in (ROOT / "examples", ROOT / "tests" / "data" / "h200-runs"):
        for path in sorted(folder.rglob("attempts/*.json")):
            try:
                verdict = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for t in verdict.get("timings") or () if isinstance(verdict, dict) else ():
                paired = t.get("paired") if isinstance(t, dict) else None
                if paired and isinstance(paired.get("rounds"), int) and paired.get("verdict"):
                    found.append(dict(paired, source=str(path.relative_to(ROOT))))
    return found


def _rounds(paired: dict, rng: random.Random) -> tuple[list[float], list[float]]:
    """Per-round (candidate, baseline) times with the recorded wins, losses and draws."""
    won, lost, rounds = paired["won"], paired["lost"], paired["rounds"]
    kinds = ["won"] * won + ["lost"] * lost + ["draw"] * (rounds - won - lost)
    rng.shuffle(kinds)
    # a won or lost round by 5 %: beyond the practical margin, so the sign test decides
    times = {"won": (1.0, 1.05), "lost": (1.05, 1.0), "draw": (1.0, 1.0)}
    return [times[k][0] for k in kinds], [times[k][1] for k in kinds]


def _sequential(cand: list[float], base: list[float], rounds: int) -> tuple[str, int]:
    """The re-measure's loop: a round at a time, stopped once settled after MIN_ROUNDS
    (or after all of them, for a search's tie recorded with fewer: a search stops its
    ties after 3, and its recorded pair holds only those)."""
    for r in range(1, rounds + 1):
        word = settled_word(cand[:r], base[:r], rounds)
        if word is not None and r >= min(MIN_ROUNDS, rounds):
            return word, r
    raise AssertionError("the full count always settles the word")


def test_the_sequential_stop_gives_the_recorded_word_on_every_recorded_pair():
    pairs = _recorded_pairs()
    assert len(pairs) >= 50 and any(p["rounds"] == 15 for p in pairs)
    rng = random.Random(25)
    used = full = 0
    words = set()
    for paired in pairs:
        for _ in range(20):
            cand, base = _rounds(paired, rng)
            fixed = paired_result(paired["baseline"], cand, base)["verdict"]
            one_way = paired["rounds"] in (paired["won"], paired["lost"])
            if beyond_margin(paired["ratio"]) or not one_way:
                assert fixed == paired["verdict"], paired["source"]
            # (every round one way by less than the margin is a tie, or was a word before
            # the margin existed: the rounds here differ by 5 %, so the sign test decides)
            word, rounds = _sequential(cand, base, paired["rounds"])
            # the re-measure's word: the rounds it ran, with the margin (paired_result)
            final = paired_result(paired["baseline"], cand[:rounds], base[:rounds])["verdict"]
            assert word == final == fixed, (paired["source"], cand, base)
            used += rounds
            full += paired["rounds"]
            words.add(word)
    assert words >= {"tie", "faster"}
    assert used < full  # ties stopped early


def test_only_a_tie_stops_early():
    assert settled_word([1.0, 1.0], [1.02, 0.98], 15) == "tie"  # one won, one lost
    assert settled_word([1.0], [1.0], 15) == "tie"  # a draw is neither won nor lost
    assert settled_word([1.0] * 14, [1.02] * 14, 15) is None  # faster needs all 15
    assert settled_word([1.0] * 15, [1.02] * 15, 15) == "faster"
    assert settled_word([1.02] * 15, [1.0] * 15, 15) == "slower"
    assert settled_word([1.02] * 6, [1.0] * 6, 15) is None


def test_a_tie_inside_the_margin_stops_once_most_rounds_are_inside_it():
    # every round won by 0.5 %: the fixed rounds' word is a tie (inside PRACTICAL_MARGIN);
    # once more than half of all the rounds are inside it, no later round can move the median
    inside, beyond = [1.005] * 7, [1.05] * 7
    ones = [1.0] * 7
    assert settled_word(ones[:3], inside[:3], 7) is None
    assert settled_word(ones[:4], inside[:4], 7) == "tie"
    assert paired_result("b", ones, inside)["verdict"] == "tie"
    assert paired_result("b", ones[:4], inside[:4])["verdict"] == "tie"
    # three rounds beyond the margin and three inside: the seventh could decide the median
    mixed = beyond[:3] + inside[:3]
    assert settled_word(ones[:6], mixed, 7) is None
    assert settled_word(ones, mixed + [1.05], 7) == "faster"
    assert paired_result("b", ones, mixed + [1.05])["verdict"] == "faster"
    assert settled_word(ones, mixed + [1.005], 7) == "tie"
    assert paired_result("b", ones, mixed + [1.005])["verdict"] == "tie"


def test_the_sequential_stop_gives_the_fixed_word_on_the_recorded_rounds_in_any_order():
    # the rounds' own times as the H200 recorded them, in their order and shuffled. A pair
    # with all its rounds (7 in a search, 15 in a re-measure): the word where the stop
    # falls (after 3, or after MIN_ROUNDS) is the fixed rounds' word. A pair its run
    # stopped early: its rounds settle the word, the one recorded. Ties inside the margin
    # with every round one way stop before the last round.
    rng = random.Random(29)
    early_inside = 0
    for paired in _recorded_pairs():
        cand, base = paired.get("candidate_rounds_ms"), paired.get("baseline_rounds_ms")
        if not cand or len(cand) != paired["rounds"] or len(base) != len(cand):
            continue
        total = 15 if paired["source"].endswith(".confirm.json") else 7
        if len(cand) > total:
            continue  # a head to head's, or an older run's longer rounds
        least = MIN_ROUNDS if total == 15 else 3
        for shuffle in (False, True, True):
            order = list(range(len(cand)))
            if shuffle:
                rng.shuffle(order)
            c, b = [cand[i] for i in order], [base[i] for i in order]
            word, r = None, len(c)
            for r in range(1, len(c) + 1):
                word = settled_word(c[:r], b[:r], total)
                if word is not None and r >= min(least, total):
                    break
            if len(c) == total:
                fixed = paired_result(paired["baseline"], c, b)["verdict"]
            else:  # stopped by its run once settled: these rounds settle it
                fixed = paired["verdict"]
            assert word == fixed == paired_result("x", c[:r], b[:r])["verdict"], paired["source"]
            one_way = paired["won"] == paired["rounds"] or paired["lost"] == paired["rounds"]
            early_inside += int(one_way and word == "tie" and r < total)
    assert early_inside > 0  # some one-way ties inside the margin stopped early
