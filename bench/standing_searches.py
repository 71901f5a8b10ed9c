#!/usr/bin/env python3
"""Fresh searches ranked by standing: `kernelladder optimize OP --max-attempts 40` for
rmsnorm, softmax and attention (3 branches, the search proposer, headless), one after
the other on one GPU, each with a wall-clock budget (--time-limit) so all three fit in
about 8 minutes including the end's re-measure of the best. Then, for each run, `replay
RUN --json`'s best: vs best (geomean against the fastest library baseline per shape),
the standing per shape, whether the end's re-measure (BestConfirmed) held, the floor
fraction and the speedup over the reference, as a table printed last. Needs a GPU.

    python3 bench/standing_searches.py [--ops rmsnorm softmax attention] [--budget-s 450]
                                       [--search-s S]

Logs and runs go under $OUT (a temporary directory when unset): OP/ is the run
directory, OP.stderr its progress lines, OP.json the summary, table.txt the table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# seconds of search per op (--time-limit): attention verifies about 10 attempts a minute,
# rmsnorm and softmax about 17; each run also starts a worker and, at the end, re-measures
# its best (and the runner-up when within noise) in a fresh worker: about 40-60 s more
SEARCH_S = {"rmsnorm": 70, "softmax": 70, "attention": 85, "int8_matmul": 70, "kv_quant": 70}
OVERHEAD_S = 70  # worker start, baselines compiled, the re-measure, replay


def _cli(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from kernelladder.cli import main; sys.exit(main())",
        *args,
    ]


def replay_summary(run_dir: Path, env: dict[str, str]) -> dict:
    """`kernelladder replay RUN --json`: the run's summary, {} when it gives none."""
    replay = subprocess.run(
        _cli("replay", str(run_dir), "--json"), cwd=ROOT, env=env, capture_output=True, text=True
    )
    if replay.returncode == 0 and replay.stdout.strip():
        return json.loads(replay.stdout)
    print(f"replay {run_dir}: rc {replay.returncode}: {replay.stderr.strip()[-500:]}", flush=True)
    return {}


def run_search(op: str, out: Path, search_s: float, hard_s: float, env: dict[str, str]) -> dict:
    run_dir = out / op
    stderr = (out / f"{op}.stderr").open("w")
    cmd = _cli(
        "optimize", op, "--max-attempts", "40", "--branches", "3", "--gate", "approve",
        "--time-limit", str(search_s), "--run-dir", str(run_dir), "--json", "--profile", "off",
    )  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    try:
        stdout, _ = proc.communicate(timeout=hard_s)
    except subprocess.TimeoutExpired:
        # over budget: a clean stop (the re-measure is cut short and says so), then harder
        proc.send_signal(signal.SIGINT)
        try:
            stdout, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, _ = proc.communicate()
    stderr.close()
    wall = time.monotonic() - started
    summary = replay_summary(run_dir, env)
    (out / f"{op}.json").write_text(json.dumps(summary, indent=1))
    live = stdout.strip().splitlines()[-1] if stdout and stdout.strip() else ""
    same = bool(live) and json.loads(live) == summary
    return {"op": op, "rc": proc.returncode, "wall_s": wall, "summary": summary, "live_eq": same}


def _row(result: dict) -> list[str]:
    s = result["summary"]
    best = s.get("best") or {}
    shapes = best.get("standing_shapes") or {}
    per_shape = " ".join(
        f"{row['vs_best']:.2f}{ {'faster': '▲', 'tie': '=', 'slower': '▼'}[row['standing']] }"
        for row in shapes.values()
    )
    confirmed = best.get("confirmed") or "not re-measured"
    again = next((c for c in s.get("confirmed") or [] if c["attempt"] == best.get("attempt")), None)
    if again is not None and again.get("vs_best") is not None:
        confirmed += f" ({again['vs_best']:.3f}x, {again['rounds']} rounds)"
    attempts = s.get("attempts") or {}
    return [
        result["op"],
        f"{attempts.get('judged', 0)}/{attempts.get('total', 0)}",
        f"#{best.get('attempt', '-')}",
        "-" if best.get("vs_best") is None else f"{best['vs_best']:.3f}x vs {best.get('versus')}",
        per_shape or "-",
        confirmed,
        "-" if best.get("floor_fraction") is None else f"{best['floor_fraction']:.0%}",
        "-" if best.get("speedup") is None else f"{best['speedup']:.2f}x",
        f"{result['wall_s']:.0f}s rc{result['rc']}{'' if result['live_eq'] else ' live!=replay'}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=["rmsnorm", "softmax", "attention"])
    parser.add_argument("--budget-s", type=float, default=450.0, help="all runs together")
    parser.add_argument(
        "--search-s", type=float, default=None, help="--time-limit of every run (default: per op)"
    )
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="standing-searches-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    deadline = time.monotonic() + args.budget_s
    results = []
    for i, op in enumerate(args.ops):
        left = deadline - time.monotonic()
        still = len(args.ops) - i
        search_s = min(args.search_s or SEARCH_S.get(op, 75), max(20.0, left / still - OVERHEAD_S))
        hard_s = max(30.0, min(search_s + OVERHEAD_S + 30, left - (still - 1) * 60))
        print(f"{op}: search {search_s:.0f}s (hard stop after {hard_s:.0f}s)", flush=True)
        results.append(run_search(op, out, search_s, hard_s, env))
    head = ["op", "judged", "best", "vs best (geomean)", "per shape (vs best)", "re-measure",
            "floor", "over ref", "wall"]  # fmt: skip
    rows = [head] + [_row(r) for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    legend = "per shape: vs best and the standing (▲ faster, = tie, ▼ slower), suite order"
    (out / "table.txt").write_text(table + "\n" + legend + "\n")
    print(f"logs: {out}")
    print(table)
    print(legend)
    return 0 if all(r["summary"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
