"""Small text formatters shared by the widgets (no textual imports)."""

from __future__ import annotations

from typing import Any

from kernelladder.app import view as v
from kernelladder.engine import (
    AttemptStatus,
    BranchStatus,
    best_baseline_name,
    judged_rows,
    standing_counts,
)
from kernelladder.verifier.contract.verdict import PRACTICAL_MARGIN, versus_fastest_baseline

# One glyph per attempt state or verdict kind; all single-cell wide.
MARKS = {
    "pass": "✓",
    "fail": "✗",
    "crash": "✗",
    "timeout": "✗",
    AttemptStatus.PROPOSED: "·",
    AttemptStatus.GATED: "?",
    AttemptStatus.VETOED: "⊘",
    AttemptStatus.RUNNING: "…",
    AttemptStatus.CANCELLED: "-",
}

BRANCH_WORDS = {BranchStatus.WAITING_GATE: "waiting at gate"}


def speedup(x: float | None, *, unmeasured: str = "—") -> str:
    return unmeasured if x is None else f"{x:.2f}×"


def percent(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def usd(x: float | None) -> str:
    return "—" if x is None else f"${x:.2f}"


def tokens(n: int | float | None) -> str:
    """A token count short enough for a header: 7,400 · 74.2k · 1.23M."""
    if n is None:
        return "—"
    n = int(n)
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1e6:.2f}M"


def tokens_shown(used: int, budget: Any) -> bool:
    """Tokens are shown beside the cost once a model spent some, or a budget bounds them."""
    return bool(used) or bool(budget)


def attempt_mark(a: v.AttemptView) -> str:
    if a.state == AttemptStatus.JUDGED:
        return MARKS.get(a.verdict_kind or "", "✗")
    return MARKS.get(a.state, "·")


STANDING_MARKS = {"faster": "▲", "tie": "=", "slower": "▼"}


def standing_marks(a: v.AttemptView) -> str:
    """One mark per shape against the fastest baseline, in suite order: ▲ faster, = tie,
    ▼ slower ("" where the log records no per-shape standing)."""
    return "".join(
        STANDING_MARKS.get(row.get("standing"), "?") for row in a.standing_shapes.values()
    )


def attempt_result(a: v.AttemptView, speed_measured: bool) -> str:
    """What the tree says after the mark: vs best (where the log records it), else the
    speedup over the reference, a failing gate, or the state; "· profiling" after a
    judged attempt while its profile runs (beside its branch, which has gone on)."""
    if a.state == AttemptStatus.JUDGED:
        if a.passed:
            if a.vs_best is not None:
                result = f"{a.vs_best:.2f}× vs best"
            elif a.speedup is not None:
                result = speedup(a.speedup)
            else:
                result = "pass" if not speed_measured else "pass, no speed"
            return result + (" · profiling" if a.stage == "profile" else "")
        if a.gate and a.gate != a.verdict_kind:
            return f"{a.verdict_kind} at {a.gate}"
        return a.verdict_kind or "fail"
    if a.state == AttemptStatus.RUNNING and a.stage:
        return f"running: {a.stage}"
    return a.state


def branch_status(b: v.BranchView) -> str:
    if b.waits_with_run:  # not "running" while nothing runs
        return "best, paused with the run" if b.is_best else "paused with the run"
    if b.state == BranchStatus.EXHAUSTED:
        return f"exhausted: {b.rule}" if b.rule else "exhausted"
    if (
        b.state == BranchStatus.WAITING_GATE and b.paused
    ):  # the gate waits; after it, the branch too
        return "paused, waiting at gate"
    if b.is_best and b.state == BranchStatus.RUNNING:
        return "best, running"
    return BRANCH_WORDS.get(b.state, b.state)


def versus_timing(timing: Any) -> tuple[str, float, str, str] | None:
    """versus_fastest_baseline of one ShapeTiming, and the text to put in brackets after
    it: the baseline's name, with the rounds won when the verifier timed the two back to
    back ("torch.compile, 3/7 rounds")."""
    paired = getattr(timing, "paired", None)
    versus = versus_fastest_baseline(timing.candidate_ms, timing.baselines_ms, timing.noise, paired)
    if versus is None:
        return None
    name, ratio, word = versus
    if paired and paired.get("baseline") == name and paired.get("rounds"):
        return name, ratio, word, f"{name}, {rounds_text(paired, word)}"
    return name, ratio, word, name


def rounds_text(paired: dict, word: str) -> str:
    """What the back-to-back rounds said, in the words a reader needs beside the standing:
    "won 7/7 rounds", "lost 7/7 rounds", "won 3/7 rounds"; a tie whose rounds all went one
    way says why it is still a tie ("won 4/4 rounds, inside the 1 % margin"). ("2/7
    rounds" beside "tie" and "0/7" beside "slower" read as the opposite of what they were.)"""
    rounds, won, lost = int(paired["rounds"]), int(paired.get("won", 0)), int(paired.get("lost", 0))
    if word == "slower" or (lost > won and word != "faster"):
        text = f"lost {lost}/{rounds} rounds"
    else:
        text = f"won {won}/{rounds} rounds"
    if word == "tie" and rounds and max(won, lost) == rounds:
        text += f", inside the {PRACTICAL_MARGIN * 100:g} % margin"
    return text


def standing_summary(verdict: Any) -> str:
    """A passing verdict's one line (VerdictReady or AttemptState: summary, vs_best,
    standing_shapes), vs best first: a log recorded before verdicts carried vs best says
    only the speedup over the reference ("14x, 58% of floor"); replayed with vs best from
    its saved verdicts, the line gets the standing in front."""
    if verdict.vs_best is None or " vs " in verdict.summary:
        return verdict.summary
    rows = judged_rows(verdict.standing_shapes)  # the margin applied, as the fold does
    versus = best_baseline_name(rows) or "best"
    counts = standing_counts(rows)
    words = f" · {counts}" if counts else ""
    return f"{verdict.vs_best:.2f}x vs {versus}{words}; over reference {verdict.summary}"
