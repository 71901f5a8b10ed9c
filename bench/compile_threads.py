#!/usr/bin/env python3
"""How long the pipelined verification's compile stage takes with more or fewer compile
threads per worker (verifier/worker/compile_ahead.py's COMPILE_THREADS), on a cold Triton cache.

For each op, a few attempts of its committed GPU example run are verified in this
process as a pipelined worker verifies them, each with a fresh, empty Triton cache, once
per thread count (the order rotating per attempt); the compile stage's seconds and the
number of kernels it compiled (the cache's new entries) are recorded. One verification
of each op first learns its input layouts and compiles its baselines (not counted).

    PYTHONPATH=. python3 bench/compile_threads.py [--ops attention int8_matmul rmsnorm]
                                                  [--threads 4 8] [--attempts 3]

Writes compile_threads.json under --out (default $OUT, else ./compile-threads-out) and
prints a table last: per op and thread count, the compile stage's median seconds and the
kernels compiled per attempt. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def attempts_of(run: Path, count: int) -> list[int]:
    """The run's first `count` attempts whose sources differ, by number."""
    seen, out = set(), []
    for path in sorted((run / "attempts").glob("*.py"), key=lambda p: int(p.stem)):
        text = path.read_text()
        if text not in seen:
            seen.add(text)
            out.append(int(path.stem))
        if len(out) == count:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=["attention", "int8_matmul", "rmsnorm"])
    ap.add_argument("--threads", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT") or "compile-threads-out")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("compile_threads: needs a GPU")
        return 2
    from speed_stage import StageClock, example_run

    from kernelladder.verifier.worker import compile_ahead, fence, selftest
    from kernelladder.verifier.worker.gates import Verifier, environment_info
    from kernelladder.verifier.worker.options import VerifyOptions

    fence.install_launch_counter()
    selftest.warm_compilers("cuda")
    verifier = Verifier("cuda", tempfile.mkdtemp(prefix="kl-threads-"), environment_info("cuda"))
    rows: list[dict[str, Any]] = []

    def verify(op: str, source: str) -> dict[str, float]:
        clock = StageClock()
        opts = VerifyOptions(op=op, source=source, device="cuda", min_speedup=0.0, pipeline=True)
        verdict = verifier.verify(opts, stage=clock.enter).verdict
        stages = clock.done()
        stages["pass"] = float(verdict.verdict == "pass")
        return stages

    for op in args.ops:
        run = example_run(op)
        numbers = attempts_of(run, args.attempts + 1)
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kl-cache-")
        verify(op, (run / "attempts" / f"{numbers[0]}.py").read_text())  # layouts, baselines
        for i, n in enumerate(numbers[1:]):
            source = (run / "attempts" / f"{n}.py").read_text()
            order = args.threads[i % len(args.threads) :] + args.threads[: i % len(args.threads)]
            for threads in order:
                cache = Path(tempfile.mkdtemp(prefix="kl-cache-"))
                os.environ["TRITON_CACHE_DIR"] = str(cache)
                compile_ahead.COMPILE_THREADS = threads
                stages = verify(op, source)
                kernels = sum(1 for p in cache.rglob("*.cubin"))
                row = {"op": op, "attempt": n, "threads": threads, "kernels": kernels,
                       "compile_s": round(stages.get("compile", 0.0), 3),
                       "correctness_s": round(stages.get("correctness", 0.0), 3),
                       "pass": bool(stages.get("pass"))}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_threads.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'op':12} {'threads':>7} {'compile s (median)':>19} {'kernels per attempt':>20}")
    for op in args.ops:
        for threads in args.threads:
            mine = [r for r in rows if r["op"] == op and r["threads"] == threads]
            if mine:
                med = statistics.median(r["compile_s"] for r in mine)
                kernels = statistics.median(r["kernels"] for r in mine)
                print(f"{op:12} {threads:7d} {med:19.2f} {kernels:20.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
