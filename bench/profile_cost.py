#!/usr/bin/env python3
"""What one Nsight Compute profile of a candidate costs, by ncu's options (issue 25): the
seconds the GPU is held to itself (ncu replaying the one profiled call), held shared (the
warm-up), the whole profile's wall, and the kernel's duration as ncu read it.

    python3 bench/profile_cost.py [--ops rmsnorm attention] [--repeat 1] [--variants 0 4]
                                  [--out DIR]

Each op's candidate is the best attempt of its committed H200 example run, profiled the
way a run profiles it (kernelladder.verifier.host.profile.profile_candidate_async, no other
work on the GPU) with ncu's options as the verifier gives them, then with each variant's
options changed: with the MemoryWorkloadAnalysis section it collected until 2026-12-03
(now its L2 hit rate is asked as one metric), --cache-control none (no cache flush before
each replay pass), without the raw page's metrics, and SpeedOfLight, LaunchStats and
Occupancy alone; with ncu's
replay passes as its log counts them. (`--clock-control none`, which the verifier now
passes, was measured against ncu's default base clocks on 2026-12-03: docs/results/2026-12-03.md.) Writes profile_cost.json under --out (default $OUT,
else ./profile-cost-out) and prints a table last. Needs a GPU and ncu.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

VARIANTS: dict[str, tuple[tuple[str, ...], bool, tuple[str, ...], tuple[str, ...]]] = {
    # extra options, the raw page's metrics (L2 hit rate, stalls), sections left out, added
    "as the verifier runs it": ((), True, (), ()),
    "+ MemoryWorkloadAnalysis (until 2026-12-03)": ((), True, (), ("MemoryWorkloadAnalysis",)),
    "+ --cache-control none": (("--cache-control", "none"), True, (), ()),
    "no raw metrics (L2 hit rate, stalls)": ((), False, (), ()),
    "SpeedOfLight+LaunchStats+Occupancy": ((), False, ("WarpStateStats",), ()),
}
PASSES = re.compile(r"- (\d+) pass")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=["rmsnorm", "attention"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--variants", type=int, nargs="+", default=None,
        help="only these variants, by their place in the table (0: as the verifier runs it)",
    )  # fmt: skip
    ap.add_argument("--out", default=os.environ.get("OUT") or "profile-cost-out")
    args = ap.parse_args()
    from speed_stage import best_attempt, example_run

    from kernelladder.verifier.host import profile

    if profile.find_ncu() is None:
        print("profile_cost: needs Nsight Compute (ncu)")
        return 2
    original = profile.profile_command
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="kl-profile-cost-"))
    for rep in range(args.repeat):
        for op in args.ops:
            run = example_run(op)
            n = best_attempt(run)
            source = (run / "attempts" / f"{n}.py").read_text()
            for i, (name, (extra, stalls, dropped, added)) in enumerate(VARIANTS.items()):
                if args.variants is not None and i not in args.variants:
                    continue

                def command(ncu: str, base: str, driver: Any, kernels: Any = (), stalls: bool = True,
                            extra: tuple = extra, want: bool = stalls, dropped: tuple = dropped,
                            added: tuple = added) -> list[str]:  # fmt: skip
                    cmd = original(ncu, base, driver, kernels, stalls=stalls and want)
                    for section in dropped:
                        at = cmd.index(section)
                        del cmd[at - 1 : at + 1]
                    at = cmd.index("-f")
                    more = [a for section in added for a in ("--section", section)]
                    return [*cmd[:at], *more, *extra, *cmd[at:]]

                profile.profile_command = command  # type: ignore[assignment]
                outcome = asyncio.run(
                    profile.profile_candidate_async(op, source, work / f"{op}-{rep}-{i}", "p")
                )
                summary = outcome.summary
                log = work / f"{op}-{rep}-{i}" / "p.ncu.log"
                found = PASSES.findall(log.read_text(errors="replace")) if log.exists() else []
                row = {
                    "op": op,
                    "attempt": n,
                    "variant": name,
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "gpu_s": outcome.gpu_s,
                    "shared_s": outcome.shared_s,
                    "wall_s": outcome.wall_s,
                    "phases": outcome.phases,
                    "duration_us": summary.duration_us if summary else None,
                    "dram_pct": summary.dram_pct if summary else None,
                    "stalls": bool(summary and summary.stalls),
                    "l2_hit_pct": summary.l2_hit_pct if summary else None,
                    "passes": sum(int(n) for n in found) if found else None,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    profile.profile_command = original  # type: ignore[assignment]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile_cost.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'op':10} {'variant':34} {'status':7} {'passes':>6} {'GPU s':>6} {'shared s':>8} "
          f"{'wall s':>7} {'kernel us':>9} {'DRAM %':>7} {'L2 hit':>6} stalls  "
          "driver: ncu start / profiled call / ncu stop s")  # fmt: skip
    for r in rows:

        def num(v: Any, f: str) -> str:
            return format(v, f) if isinstance(v, int | float) else "-"

        print(
            f"{r['op']:10} {r['variant'][:34]:34} {r['status']:7} {num(r['passes'], '6d')} "
            f"{num(r['gpu_s'], '6.2f')} {num(r['shared_s'], '8.2f')} {num(r['wall_s'], '7.2f')} "
            f"{num(r['duration_us'], '9.1f')} {num(r['dram_pct'], '7.1f')} "
            f"{num(r['l2_hit_pct'], '6.1f')} {str(r['stalls']):6} "
            + " / ".join(
                num((r["phases"] or {}).get(k), ".3f")
                for k in ("profiler_start_s", "profiled_call_s", "profiler_stop_s")
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
