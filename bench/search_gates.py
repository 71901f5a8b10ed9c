#!/usr/bin/env python3
"""Does a default search run meet gates on the GPU, and do vetoes bind? Two real runs of
the engine (the search proposer, the local GPU worker, default stagnation 8, 3 branches):
one with --gate approve, one with --gate veto. For each: the gates raised (and how many
were family changes offered because a branch stagnated), and for the veto run whether
any later proposal on a branch used a family vetoed there (it must not).

    PYTHONPATH=. python3 bench/search_gates.py [--ops rmsnorm,kv_quant] [--attempts 30]
                                               [--device cuda]

Logs (each run's directory) go under $OUT (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelladder.engine import RunOptions, create_run, read_events  # noqa: E402
from kernelladder.engine.record import events as ev  # noqa: E402


def one_run(op: str, gate: str, attempts: int, device: str, out: Path) -> dict:
    run_dir = out / f"{op}-{gate}"
    options = RunOptions(
        op=op, device=device, gate=gate, max_attempts=attempts, run_dir=str(run_dir)
    )
    started = time.monotonic()
    state = asyncio.run(create_run(options).run())
    events = read_events(run_dir)
    raised = [e for e in events if isinstance(e, ev.GateRaised)]
    received = {e.attempt: e for e in events if isinstance(e, ev.ProposalReceived)}
    stagnated = [g for g in raised if "without a gain" in (received[g.attempt].undo_reason or "")]
    # a vetoed family must not come back on its branch
    vetoed_at: dict[tuple[str, str], int] = {}
    for e in events:
        if isinstance(e, ev.GateResolved) and e.decision == "veto":
            gate_ev = next(g for g in raised if g.gate_id == e.gate_id)
            moved = received[gate_ev.attempt]
            if moved.meta.get("from_family"):
                vetoed_at.setdefault((moved.branch_id, moved.family or ""), moved.attempt)
    broken = [
        n
        for n, r in received.items()
        for (bid, fam), at in vetoed_at.items()
        if r.branch_id == bid and r.family == fam and n > at
    ]
    return {
        "op": op,
        "gate": gate,
        "attempts": len(received),
        "gates": len(raised),
        "stagnation_changes": len(stagnated),
        "vetoed_families": len(vetoed_at),
        "vetoed_family_reproposed": len(broken),
        "finish": state.finish_reason,
        "seconds": time.monotonic() - started,
        "run_dir": str(run_dir),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="rmsnorm,kv_quant")
    parser.add_argument("--attempts", type=int, default=30)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="search-gates-"))
    out.mkdir(parents=True, exist_ok=True)
    ops = [o for o in args.ops.split(",") if o]
    rows = []
    for op, gate in zip(ops, ("approve", "veto"), strict=False):
        rows.append(one_run(op, gate, args.attempts, args.device, out))
        print(rows[-1], flush=True)
    print()
    head = ("op", "gate", "attempts", "gates", "stagnation_changes", "vetoed_families",
            "vetoed_family_reproposed", "finish", "seconds")  # fmt: skip
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(f"{r[h]:.0f}" if h == "seconds" else str(r[h]) for h in head))
    print(f"logs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
