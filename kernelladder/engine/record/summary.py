"""The run summary: `optimize --json` at the end of a live run and `replay --json` both
print `summarize(fold(events))`, so the two are equal. Only facts from the log go in
(times are differences of logged timestamps, never the clock at printing)."""

from __future__ import annotations

from typing import Any

from kernelladder.engine.record.standing_rank import best_baseline_name
from kernelladder.engine.record.state import AttemptStatus, RunState, closest_to_holding
from kernelladder.verifier.contract.verdict import BEATS_EVERY_BASELINE

SUMMARY_SCHEMA_VERSION = 1


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def summarize(state: RunState) -> dict[str, Any]:
    attempts = state.attempts.values()
    judged = [a for a in attempts if a.status == AttemptStatus.JUDGED]
    best = state.attempts.get(state.best_attempt) if state.best_attempt is not None else None
    gates = state.gates.values()
    out = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "run_id": state.run_id,
        "op": state.op,
        "op_kind": state.op_kind,
        "proposer": state.proposer,
        "model": state.model,
        "device": state.device,
        "gpu": state.gpu,
        "runner": state.runner,
        "speed_measured": state.speed_measured,
        "target": state.target,
        "attempts": {
            "total": state.attempts_used,
            "judged": len(judged),
            "passed": sum(1 for a in judged if a.passed),
            "failed": sum(1 for a in judged if not a.passed),
            "vetoed": sum(1 for a in attempts if a.status == AttemptStatus.VETOED),
            "unverified": sum(
                1 for a in attempts if a.status not in (AttemptStatus.JUDGED, AttemptStatus.VETOED)
            ),
            "retries": state.retries,
        },
        "branches": [
            {
                "id": b.id,
                "strategy": b.strategy,  # what it was opened with
                "label": state.branch_label(b.id),  # the family it stands on now, as shown
                "status": b.status,
                "rule": b.rule,
                "detail": b.detail,
                "from_attempt": b.from_attempt,
                "opened_by": b.opened_by,
                "attempts": len(b.attempts),
                "passed": b.passes,
                "best_attempt": b.best_attempt,
                "best_speedup": _round(b.best_speedup),
            }
            for b in state.branches.values()
        ],
        "best": None
        if best is None
        else {
            "attempt": best.number,
            "branch": best.branch_id,
            "strategy": best.strategy,  # its branch's, as proposed
            "family": best.family,  # the kernel's own (None for a proposer without families)
            "move": best.move,
            "speedup": _round(best.speedup),
            "floor_fraction": _round(best.floor_fraction),
            "source_hash": best.source_hash,
            "source": f"attempts/{best.number}.py",
        },
        "best_speedup": _round(state.best_speedup),
        "stop_reason": state.finish_reason,
        "stop_detail": state.finish_detail,
        "finished": state.finished,
        "gates": {
            "raised": len(state.gates),
            "approved": sum(1 for g in gates if g.decision == "approve"),
            "vetoed": sum(1 for g in gates if g.decision == "veto"),
            "pending": len(state.pending_gates),
        },
        "cost": {
            "usd": round(state.cost_usd, 6),
            "tokens_in": state.tokens_in,
            "tokens_out": state.tokens_out,
        },
        "elapsed_s": round(state.elapsed_s, 3),
        "resumed": state.reopened,
        "events": state.events,
    }
    # Where attempts stand against the fastest library baseline (VerdictReady.standing):
    # only in logs that record it, so the summaries of older runs stay as they were
    if any(a.standing for a in judged):
        if out["best"] is not None:
            out["best"]["standing"] = best.standing
        out["beats_every_baseline"] = sorted(
            a.number for a in judged if a.standing == BEATS_EVERY_BASELINE
        )
    # vs best (VerdictReady.vs_best) and the end's re-measure: only in logs that record
    # them, so older runs' summaries (and their replays) are unchanged
    if any(a.vs_best is not None for a in judged):
        if best is not None:
            out["best"]["vs_best"] = _round(best.vs_best)
            out["best"]["versus"] = best_baseline_name(best.standing_shapes)
            out["best"]["standing_shapes"] = best.standing_shapes
            out["best"]["speedup_over"] = "reference"
        out["best_vs_best"] = _round(best.vs_best) if best is not None else None
        for row, b in zip(out["branches"], state.branches.values(), strict=True):
            mine = state.attempts.get(b.best_attempt) if b.best_attempt is not None else None
            row["best_vs_best"] = _round(mine.vs_best) if mine is not None else None
    if state.confirmations:
        out["confirmed"] = [
            {**c, "vs_best": _round(c["vs_best"]), "noise": _round(c["noise"])}
            for c in state.confirmations.values()
        ]
        held = [c["attempt"] for c in state.confirmations.values() if c["held"]]
        out["confirmed_best"] = best.number if best is not None and best.number in held else (
            held[0] if held else None
        )  # fmt: skip
        if out["best"] is not None and best.number in state.confirmations:
            mine = state.confirmations[best.number]
            out["best"]["confirmed"] = "confirmed" if mine["held"] else "did not hold"
        ranked = state.ranked_best
        if ranked is not None and best is not None and ranked != best.number:
            # the first best did not hold: the run's best is the re-measured one that did
            out["best"]["instead_of"] = {"attempt": ranked, "confirmed": "did not hold"}
        closest = closest_to_holding(state)
        if closest is not None:
            c = state.confirmations[closest]
            out["none_held"] = {
                "re_measured": len(state.confirmations),
                "closest": closest,
                "vs_best": _round(c["vs_best"]),
                "detail": c["detail"],
            }
    # kernels put into a model (DeployChecked): only in logs that record one
    if state.deploys:
        out["deploys"] = [
            {k: d[k] for k in ("seq", "attempt", "op", "model", "status", "summary", "result")}
            for d in state.deploys
        ]
    return out
