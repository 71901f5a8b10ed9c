#!/usr/bin/env python3
"""How much of a saved run a person is asked about, and whether its branches keep their
lines: gates, family changes, returns to a family a branch had left, changes into the
family another live branch held, approved moves not built on, branches that ended by
stagnation. No GPU needed; reads only the event log.

    python3 bench/gate_churn.py RUN_DIR [RUN_DIR ...] [--json]

Per run, one line of counts, then one line per gate (attempt, branch, move, reason) and
per family return (the branch, the attempt, the family it went back to).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def churn(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts of one run's log (events as JSON objects)."""
    family_of: dict[int, str | None] = {}
    parent_of: dict[int, int | None] = {}
    branch_family: dict[str, str | None] = {}  # the family each branch is on now
    left: dict[str, set[str]] = {}  # families each branch has left
    closed: set[str] = set()
    approved: dict[str, int] = {}  # branch -> the attempt of its last approved gate
    gate_attempt: dict[str, int] = {}
    out: dict[str, Any] = {
        "attempts": 0,
        "gates": [],
        "family_changes": 0,
        "returns": [],
        "into_a_live_branchs_family": [],
        "approved_not_built_on": [],
        "stagnated": [],
        "exhausted": [],
    }

    def descends(n: int | None, ancestor: int) -> bool:
        seen: set[int] = set()
        while n is not None and n not in seen:
            if n == ancestor:
                return True
            seen.add(n)
            n = parent_of.get(n)
        return False

    for e in events:
        kind = e.get("kind")
        if kind == "proposal_received":
            n, bid, family = e["attempt"], e["branch_id"], e.get("family")
            family_of[n], parent_of[n] = family, e.get("parent_attempt")
            if e.get("proposer") == "start":
                continue
            out["attempts"] += 1
            if bid in approved:
                base = approved[bid]
                if family == family_of.get(base) and not descends(e.get("parent_attempt"), base):
                    out["approved_not_built_on"].append(
                        {"attempt": n, "branch": bid, "approved": base,
                         "parent": e.get("parent_attempt")}
                    )  # fmt: skip
            now = branch_family.get(bid)
            if family and now and family != now:
                out["family_changes"] += 1
                left.setdefault(bid, set()).add(now)
                if family in left[bid]:
                    out["returns"].append({"attempt": n, "branch": bid, "family": family})
                held = [
                    b
                    for b, f in branch_family.items()
                    if b != bid and b not in closed and f == family
                ]
                if held:
                    out["into_a_live_branchs_family"].append(
                        {"attempt": n, "branch": bid, "family": family, "held_by": held}
                    )
            if family:
                branch_family[bid] = family
        elif kind == "gate_raised":
            gate_attempt[e["gate_id"]] = e["attempt"]
            out["gates"].append(
                {"gate": e["gate_id"], "attempt": e["attempt"], "branch": e["branch_id"],
                 "move": e["move"], "reason": e["reason"]}
            )  # fmt: skip
        elif kind == "gate_resolved" and e.get("decision") == "approve":
            n = gate_attempt.get(e["gate_id"])
            bid = next((g["branch"] for g in out["gates"] if g["gate"] == e["gate_id"]), None)
            if n is not None and bid is not None:
                approved[bid] = n
        elif kind in ("branch_exhausted", "branch_pruned"):
            closed.add(e["branch_id"])
            if kind == "branch_exhausted":
                row = {"branch": e["branch_id"], "rule": e.get("rule"), "detail": e.get("detail")}
                out["exhausted"].append(row)
                if e.get("rule") == "stagnation":
                    out["stagnated"].append(row)
    return out


def summary_line(name: str, c: dict[str, Any]) -> str:
    return (
        f"{name}: {c['attempts']} proposals, {len(c['gates'])} gates, "
        f"{c['family_changes']} family changes, {len(c['returns'])} back to a family left, "
        f"{len(c['into_a_live_branchs_family'])} into a live branch's family, "
        f"{len(c['approved_not_built_on'])} approved moves not built on, "
        f"{len(c['stagnated'])} branches stagnated, "
        f"{len(c['exhausted'])} branches ended"
    )


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    runs = [Path(a) for a in argv if a != "--json"]
    if not runs:
        print("usage: python3 bench/gate_churn.py RUN_DIR [RUN_DIR ...] [--json]")
        return 2
    report = {}
    for run in runs:
        log = run / "events.jsonl"
        if not log.exists():
            print(f"{run}: no events.jsonl")
            return 2
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        report[str(run)] = c = churn(events)
        if as_json:
            continue
        print(summary_line(run.name, c))
        for g in c["gates"]:
            print(f"  {g['gate']} {g['branch']} #{g['attempt']}: {g['move']} | {g['reason']}")
        for r in c["returns"]:
            print(f"  return: {r['branch']} #{r['attempt']} back to {r['family']}")
        for r in c["exhausted"]:
            print(f"  ended: {r['branch']} {r['rule']}: {r['detail']}")
    if as_json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main(sys.argv[1:]))
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        sys.stderr.close()
        raise SystemExit(0) from None
