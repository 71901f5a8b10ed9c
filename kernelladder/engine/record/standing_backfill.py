"""A log recorded before VerdictReady carried the standing (vs best, per-shape rows) read
as today's: each passing verdict's standing computed from its saved verdict
(attempts/<n>.json), where that verdict carries the baselines' times, by the same
functions the engine uses live (standing_rank.standing_shapes, verdict.vs_best). The
log on disk is never changed; replay and the app's --replay fold the filled events."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import ATTEMPTS_DIR
from kernelladder.engine.record.standing_rank import standing_shapes
from kernelladder.verifier.contract.verdict import Verdict, standing, standing_text, vs_best


def _saved_verdict(run_dir: Path, attempt: int) -> Verdict | None:
    try:
        data = json.loads((run_dir / ATTEMPTS_DIR / f"{attempt}.json").read_text())
        return Verdict.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def fill_standing(events: Sequence[ev.Event], run_dir: str | Path) -> list[ev.Event]:
    """`events` with each passing VerdictReady that records no vs best given the one its
    saved verdict gives (untouched where the verdict is missing, measured no speed, or
    no baseline ran), and per-shape rows recorded without the shape's noise (which the
    geomean's noise is made of) given it. A log recorded by today's code comes back as
    it was."""
    root = Path(run_dir)
    out: list[ev.Event] = []
    for e in events:
        if (
            isinstance(e, ev.VerdictReady)
            and e.standing_shapes
            and any("noise" not in row for row in e.standing_shapes.values())
        ):
            e = _with_shape_noise(e, _saved_verdict(root, e.attempt))
        elif (
            isinstance(e, ev.VerdictReady)
            and e.verdict == "pass"
            and e.vs_best is None
            and e.speedup is not None
            and not e.standing_shapes
        ):
            verdict = _saved_verdict(root, e.attempt)
            figure = vs_best(verdict.timings) if verdict is not None else None
            if verdict is not None and figure is not None:
                e = dataclasses.replace(
                    e,
                    vs_best=round(figure, 6),
                    standing_shapes=standing_shapes(verdict.timings),
                    standing=e.standing or standing_text(standing(verdict.timings)),
                )
        out.append(e)
    return out


def _with_shape_noise(e: ev.VerdictReady, verdict: Verdict | None) -> ev.VerdictReady:
    """The event's per-shape rows with each shape's noise from its saved verdict; as it
    was when the verdict is missing or does not time every shape the rows name."""
    if verdict is None:
        return e
    noise = {t.label: t.noise for t in verdict.timings}
    if any(noise.get(label) is None for label in e.standing_shapes):
        return e
    rows = {
        label: {**row, "noise": round(float(noise[label]), 6)}
        for label, row in e.standing_shapes.items()
    }
    return dataclasses.replace(e, standing_shapes=rows)


__all__ = ["fill_standing"]
