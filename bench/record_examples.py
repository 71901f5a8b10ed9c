#!/usr/bin/env python3
"""Re-record the committed GPU examples with today's code: fresh headless searches
(`kernelladder optimize OP --device cuda`, 3 branches, the search proposer; the tune
proposer for the own-kernel workspace examples/own-kernel), one after the other on one
GPU, each with a wall-clock budget (--time-limit) so that all six, the end's re-measure
included, fit in about 9 minutes. Nsight Compute profiles are off (each held the GPU
12-14 s). Then each run is replayed (`kernelladder replay RUN` and `--json`) and a table
printed last: the best by standing, the end's re-measure, whether the best is the one
that held, and the replay's first line about the best (it must lead with vs best).

    python3 bench/record_examples.py [--ops rmsnorm softmax attention int8_matmul
                                     kv_quant own-kernel] [--budget-s 510] [--search-s S]

Needs one GPU, torch and triton (the device image has them); nothing else (textual,
asyncssh and anthropic are not used). Writes under $OUT (a temporary directory when
unset), at most 8 files: <gpu>-<name>.tar.gz for each run (the run directory named as in
examples/ after the GPU that ran it, e.g. h100-rmsnorm-search, with the run's stderr and
its replay's text beside it) and table.txt. To commit: `tar xzf
h100-rmsnorm-search.tar.gz -C examples/` (after removing the old one). The default
searches of examples/ (profiles on) come from bench/default_rate.py's runs.tar.gz.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ("rmsnorm", "softmax", "attention", "int8_matmul", "kv_quant", "own-kernel")
# the example directory each run becomes, after the GPU's model (gpu_prefix)
NAMES = {op: f"{op.replace('_', '-')}-search" for op in OPS} | {"own-kernel": "own-kernel-run"}
# seconds of search per run (--time-limit); about 20 attempts at 2026-12-02's rates with
# profiles off (rmsnorm 27-35 a minute, attention about 15)
SEARCH_S = {"rmsnorm": 45, "softmax": 45, "attention": 55, "int8_matmul": 45, "kv_quant": 45}
SEARCH_S["own-kernel"] = 40
OVERHEAD_S = 40  # worker start and baselines, the end's re-measure (17-22 s), replay


def _cli(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from kernelladder.cli import main; sys.exit(main())",
        *args,
    ]


def _optimize_args(op: str, run_dir: Path, search_s: float, device: str) -> list[str]:
    target = str(ROOT / "examples" / "own-kernel") if op == "own-kernel" else op
    proposer = "tune" if op == "own-kernel" else "search"
    return [
        "optimize", target, "--device", device, "--proposer", proposer,
        "--max-attempts", "40", "--branches", "3", "--gate", "approve",
        "--profile", "off", "--time-limit", f"{search_s:g}",
        "--run-dir", str(run_dir), "--json",
    ]  # fmt: skip


def _stop(proc: subprocess.Popen) -> str:
    """Over budget: a clean stop (the re-measure is cut short and says so), then harder."""
    for signum, wait in ((signal.SIGINT, 30), (signal.SIGINT, 20)):
        proc.send_signal(signum)
        try:
            return proc.communicate(timeout=wait)[0]
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    return proc.communicate()[0]


def gpu_prefix(device: str) -> str:
    """'h100' for an NVIDIA H100 80GB HBM3, 'h200' for an H200; 'cpu' on the CPU."""
    if device == "cpu":
        return "cpu"
    import re

    import torch

    found = re.search(r"\b([a-z]\d{2,3})\b", torch.cuda.get_device_name(0).lower())
    return found.group(1) if found else "gpu"


def record(
    op: str, work: Path, out: Path, search_s: float, hard_s: float, env: dict, device: str
) -> dict:
    name = f"{gpu_prefix(device)}-{NAMES[op]}"
    run_dir = work / name
    stderr_path = work / f"{name}.stderr"
    started = time.monotonic()
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            _cli(*_optimize_args(op, run_dir, search_s, device)),
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
        try:
            stdout = proc.communicate(timeout=hard_s)[0]
        except subprocess.TimeoutExpired:
            stdout = _stop(proc)
    wall = time.monotonic() - started
    text = subprocess.run(
        _cli("replay", str(run_dir)), cwd=ROOT, env={**env, "COLUMNS": "250"},
        capture_output=True, text=True,
    )  # fmt: skip
    replay = subprocess.run(
        _cli("replay", str(run_dir), "--json"), cwd=ROOT, env=env, capture_output=True, text=True
    )
    summary = json.loads(replay.stdout) if replay.returncode == 0 and replay.stdout.strip() else {}
    (work / f"{name}.replay.txt").write_text(text.stdout + text.stderr)
    live = stdout.strip().splitlines()[-1] if stdout and stdout.strip() else ""
    try:
        same = bool(live) and json.loads(live) == summary
    except ValueError:
        same = False
    with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
        if run_dir.exists():
            tar.add(run_dir, arcname=name)
        for extra in (stderr_path, work / f"{name}.replay.txt"):
            tar.add(extra, arcname=f"{name}.logs/{extra.name}")
    first = next((ln for ln in text.stdout.splitlines() if "best" in ln), "")
    return {
        "op": op,
        "rc": proc.returncode,
        "wall_s": wall,
        "summary": summary,
        "live_eq": same,
        "replay_best": first.strip(),
    }


def _row(result: dict) -> list[str]:
    s = result["summary"]
    best = s.get("best") or {}
    attempts = s.get("attempts") or {}
    figure = "-"
    if best.get("vs_best") is not None:
        figure = f"#{best['attempt']} {best['vs_best']:.3f}x vs {best.get('versus')}"
    elif best:
        figure = f"#{best.get('attempt')} (no vs best)"
    confirmed = best.get("confirmed") or "not re-measured"
    if best.get("instead_of"):
        confirmed += f" (instead of #{best['instead_of']['attempt']}, did not hold)"
    if s.get("none_held"):
        confirmed = f"none held; closest #{s['none_held']['closest']}"
    over = "-" if best.get("speedup") is None else f"{best['speedup']:.2f}x"
    leads = "yes" if " vs " in result["replay_best"].split("over reference")[0] else "NO"
    return [
        result["op"],
        f"{attempts.get('judged', 0)}/{attempts.get('total', 0)}",
        figure,
        confirmed,
        over,
        leads,
        f"{result['wall_s']:.0f}s rc{result['rc']}{'' if result['live_eq'] else ' live!=replay'}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--budget-s", type=float, default=510.0, help="all runs together")
    parser.add_argument(
        "--search-s", type=float, default=None, help="--time-limit of every run (default: per op)"
    )
    # cpu: only to try the plumbing here (no speed: nothing to show)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="record-examples-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="record-examples-work-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ANTHROPIC_API_KEY", None)
    deadline = time.monotonic() + args.budget_s
    results = []
    for i, op in enumerate(args.ops):
        left = deadline - time.monotonic()
        still = len(args.ops) - i
        search_s = min(args.search_s or SEARCH_S[op], max(15.0, left / still - OVERHEAD_S))
        hard_s = max(30.0, min(search_s + OVERHEAD_S + 25, left - (still - 1) * 45))
        print(f"{op}: search {search_s:.0f}s (hard stop after {hard_s:.0f}s)", flush=True)
        results.append(record(op, work, out, search_s, hard_s, env, args.device))
    shutil.rmtree(work, ignore_errors=True)
    head = ["op", "judged", "best (vs best)", "end's re-measure", "over ref", "leads", "wall"]
    rows = [head] + [_row(r) for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    legend = "leads: the replay's first line about the best puts vs best before the reference"
    (out / "table.txt").write_text(table + "\n" + legend + "\n")
    print(f"run tarballs: {out}")
    print(table)
    print(legend)
    return 0 if all(r["summary"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
