#!/usr/bin/env python3
"""Check a search run against issue 3's bar: the best kernel's share of the copy floor on
the largest shape, and whether it beats every library baseline (torch.compile included)
at every GPU shape. Reads only the run directory (no GPU needed).

    python bench/search_bar.py RUN_DIR [RUN_DIR ...] [--floor 0.9]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelladder.engine import fold, read_events, summarize  # noqa: E402


def check(run_dir: Path, floor_bar: float) -> bool:
    summary = summarize(fold(read_events(run_dir)))
    best = summary.get("best") or {}
    if not best.get("attempt"):
        print(f"{run_dir}: no passing attempt")
        return False
    verdict = json.loads((run_dir / "attempts" / f"{best['attempt']}.json").read_text())
    timings = verdict.get("timings") or []
    if not timings:
        print(f"{run_dir}: best attempt #{best['attempt']} has no timings (speed not measured)")
        return False
    print(
        f"\n{summary['op']}: best #{best['attempt']} ({best['strategy']}: {best['move']}), "
        f"{summary['attempts']['total']} attempts, stop: {summary['stop_reason']}"
    )
    print("| shape | best ms | noise | baselines ms | beats all |")
    print("|---|---|---|---|---|")
    ok = True
    for t in timings:
        beats = _beats(t)
        ok &= beats
        base = ", ".join(f"{k} {v:.4f}" for k, v in sorted(t["baselines_ms"].items()))
        print(
            f"| {t['label']} | {t['candidate_ms']:.4f} | {(t['noise'] or 0):.1%} | {base} | "
            f"{'yes' if beats else 'NO'} |"
        )
    largest = max(timings, key=lambda t: t["floor_ms"] or 0)
    share = largest["floor_fraction"] or 0
    print(f"largest shape {largest['label']}: {share:.1%} of the floor (bar {floor_bar:.0%})")
    ok &= share >= floor_bar
    print(f"bar {'MET' if ok else 'NOT met'} for the best attempt")
    # Any passing attempt that is faster than every baseline at every shape, and by how
    # much beyond its own timing noise (a margin inside the noise is a tie, not a win).
    for attempt, ts in faster_everywhere(run_dir):
        clear = all(_beats(t, 1 + (t["noise"] or 0)) for t in ts)
        print(
            f"  attempt #{attempt}: faster than every baseline at every shape"
            f" ({'beyond' if clear else 'NOT beyond'} its noise)"
        )
    return ok


def _beats(timing: dict, margin: float = 1.0) -> bool:
    """The candidate's median (times `margin`) is below every baseline's at this shape; a
    baseline the verifier timed back to back with it (`paired`) must have lost every round."""
    paired = timing.get("paired") or {}
    if paired and paired.get("verdict") != "faster":
        return False
    return all(
        timing["candidate_ms"] * margin < ms
        for name, ms in timing["baselines_ms"].items()
        if name != paired.get("baseline")
    )


def faster_everywhere(run_dir: Path) -> list[tuple[int, list[dict]]]:
    """(attempt, timings) of the passing attempts faster than every baseline at every
    shape in their own verdicts, in attempt order."""
    out = []
    for path in sorted((run_dir / "attempts").glob("*.json"), key=lambda p: int(p.stem)):
        v = json.loads(path.read_text())
        ts = v.get("timings") or []
        if v.get("verdict") == "pass" and ts and all(_beats(t) for t in ts):
            out.append((int(path.stem), ts))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--floor", type=float, default=0.9)
    args = parser.parse_args()
    results = [check(d, args.floor) for d in args.run_dirs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
