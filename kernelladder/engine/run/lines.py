"""One-line texts the log records: any text cut to one line, and a verdict's summary."""

from __future__ import annotations

from typing import Any

from kernelladder.engine.record.standing_rank import best_baseline_name, standing_shapes
from kernelladder.verifier.contract.verdict import (
    BEATS_EVERY_BASELINE,
    early_stop_text,
    standing,
    standing_text,
    vs_best,
)


def one_line(text: object, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def verdict_line(verdict: Any, versus: str | None = None) -> str:
    """One line: the failing gate's detail, or the speed (or why it was not measured).
    With a library baseline timed, vs best leads: "1.07x vs torch.compile (3 faster, 2
    tie), 103% of floor; 8.14x over reference"; else the speedup over the reference and
    the standing as before. `versus`: standing_text of its timings, when worked out."""
    if verdict.verdict != "pass":
        gate = verdict.gates.get(verdict.gate or "")
        return one_line(gate.detail if gate else verdict.kind)
    if verdict.speedup is not None and getattr(verdict, "early_stop", None):
        return f"{early_stop_text(verdict.early_stop)}: {_speed_figures(verdict, versus)}"
    if verdict.speedup is not None:
        return _speed_figures(verdict, versus)
    speed = verdict.gates.get("speed")
    return one_line("passed; " + (speed.detail if speed and speed.detail else "speed not measured"))


def _speed_figures(verdict: Any, versus: str | None) -> str:
    """The speed part of a passing verdict's line."""
    if versus is None:
        versus = standing_text(standing(verdict.timings))
    floor = f", {verdict.floor_fraction:.0%} of floor" if verdict.floor_fraction is not None else ""
    geomean = vs_best(verdict.timings)
    if geomean is not None:  # the figure of merit first, the reference second
        against = best_baseline_name(standing_shapes(verdict.timings)) or "best"
        words = f" ({versus})" if versus else ""
        return f"{geomean:.3g}x vs {against}{words}{floor}; {verdict.speedup:.3g}x over reference"
    line = f"{verdict.speedup:.3g}x{floor}"
    if versus and versus != BEATS_EVERY_BASELINE:
        versus = f"shapes vs baselines: {versus}"  # against the fastest, per shape
    return f"{line}; {versus}" if versus else line
