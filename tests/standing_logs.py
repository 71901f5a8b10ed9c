"""A committed H200 run's log as the engine records it now (shared by the standing tests).

The runs under examples/ predate vs best: their VerdictReady events lack vs_best and
standing_shapes, and their BestImproved were decided by the speedup over the reference.
`reranked_events` gives the same log with both worked out as the engine now does, from
the run's own recorded verdicts (attempts/<n>.json, real H200 timings): each passing
VerdictReady carries its verdict's vs best and per-shape standing, and BestImproved
follows from state.improvement after each verdict. Nothing is invented.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kernelladder.engine import events as ev
from kernelladder.engine import standing_rank
from kernelladder.engine.log import read_attempt_verdict, read_events
from kernelladder.engine.state import apply, improvement, new_state
from kernelladder.verifier.verdict import Verdict, vs_best


def reranked_events(run: Path) -> list[ev.Event]:
    state = new_state()
    out: list[ev.Event] = []
    seq = 0

    def add(e: ev.Event) -> None:
        nonlocal seq
        e = dataclasses.replace(e, seq=seq)
        seq += 1
        apply(state, e)
        out.append(e)

    for e in read_events(run):
        if isinstance(e, ev.BestImproved):
            continue
        if isinstance(e, ev.VerdictReady) and e.verdict == "pass" and e.speedup is not None:
            verdict = Verdict.from_dict(read_attempt_verdict(run, e.attempt))
            e = dataclasses.replace(
                e,
                vs_best=vs_best(verdict.timings),
                standing_shapes=standing_rank.standing_shapes(verdict.timings),
            )
        if isinstance(e, ev.RunFinished):
            best = state.attempts.get(state.best_attempt or -1)
            e = dataclasses.replace(
                e,
                best_attempt=state.best_attempt,
                best_speedup=state.best_speedup,
                best_vs_best=best.vs_best if best is not None else None,
            )
        add(e)
        if isinstance(e, ev.VerdictReady):
            branch, overall = improvement(state, e.attempt)
            if branch:
                a = state.attempts[e.attempt]
                add(
                    ev.BestImproved(
                        attempt=e.attempt,
                        branch_id=e.branch_id,
                        speedup=a.speedup,
                        overall=overall,
                        vs_best=a.vs_best,
                        ts=e.ts,
                    )  # fmt: skip
                )
    return out
