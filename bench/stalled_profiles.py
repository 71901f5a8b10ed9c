#!/usr/bin/env python3
"""Whether the engine's rule for a stalled branch's profile (engine/run/profiling.py:
profile_lands_late) would have taken each "branch stalled" profile of saved runs, against
how many of that branch's proposals came after the profile landed (its readers).

    python3 bench/stalled_profiles.py RUN_DIR [RUN_DIR ...]

Each run's log is folded up to the moment the profile started, and the rule is asked
there. No GPU needed. Prints one line per profile, then the four counts: skipped or
taken, by whether any proposal read it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    from kernelladder.engine import events as ev
    from kernelladder.engine import fold, read_events
    from kernelladder.engine.run.profiling import stalled_profile_late

    if not argv:
        print("usage: python3 bench/stalled_profiles.py RUN_DIR [RUN_DIR ...]")
        return 2
    counts = {(s, r): 0 for s in ("skipped", "taken") for r in ("read", "unread")}
    for run in map(Path, argv):
        if not (run / "events.jsonl").exists():
            print(f"{run}: no events.jsonl")
            return 2
        events = read_events(run)
        proposals = [e for e in events if isinstance(e, ev.ProposalReceived)]
        stalled = [e for e in events if isinstance(e, ev.ProfileReady) and e.reason == "branch stalled"]  # fmt: skip
        for p in stalled:
            started = next(
                e.ts for e in events
                if isinstance(e, ev.AttemptProgress) and e.gate == "profile" and e.attempt == p.attempt
            )  # fmt: skip
            state = fold([e for e in events if e.ts < started])
            late = stalled_profile_late(state, p.branch_id)
            readers = sum(1 for e in proposals if e.ts > p.ts and e.branch_id == p.branch_id)
            counts[("skipped" if late else "taken", "read" if readers else "unread")] += 1
            print(f"{run.name} #{p.attempt} ({p.branch_id}): read by {readers}; "
                  f"{'skipped: ' + late if late else 'taken'}")  # fmt: skip
    print(", ".join(f"{s} and {r}: {n}" for (s, r), n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
