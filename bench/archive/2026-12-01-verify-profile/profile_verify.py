#!/usr/bin/env python3
"""Where a warm GPU verification spends its time: committed rmsnorm and attention
candidates verified in-process (the worker's Verifier, no sandbox) under cProfile, with
the time between progress lines per gate and the top functions by cumulative time.

    PYTHONPATH=. python3 bench/archive/2026-12-01-verify-profile/profile_verify.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.ops import registry  # noqa: E402
from kernelladder.verifier import fence  # noqa: E402
from kernelladder.verifier.gates import Verifier, VerifyOptions, environment_info  # noqa: E402

RUNS = {"rmsnorm": "examples/h200-rmsnorm-standing", "attention": "examples/h200-attention-search"}


def main() -> None:
    registry.builtin_ops()
    torch.cuda.init()
    fence.install_launch_counter()
    scratch = tempfile.mkdtemp()
    verifier = Verifier("cuda", scratch, environment_info("cuda"))
    for op, run in RUNS.items():
        for n in range(1, 7):
            source = (ROOT / run / "attempts" / f"{n}.py").read_text()
            marks: list[tuple[float, str]] = []

            def progress(gate: str, message: str, marks: list = marks) -> None:
                marks.append((time.perf_counter(), f"{gate}: {message}"))

            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            outcome = verifier.verify(
                VerifyOptions(op=op, source=source, device="cuda", min_speedup=0.0), progress
            )
            prof.disable()
            total = time.perf_counter() - t0
            v = outcome.verdict
            print(f"== {op} #{n}: {v.verdict} {v.gate} {total:.2f}s", flush=True)
            spans: dict[str, float] = {}
            for (t, label), (t2, _) in zip(marks, marks[1:] + [(t0 + total, "")], strict=True):
                key = (
                    label.split(":")[0] + ":" + label.split(":")[1].split()[0]
                    if ":" in label
                    else label
                )
                spans[key] = spans.get(key, 0.0) + (t2 - t)
            print("   spans:", {k: round(s, 3) for k, s in spans.items()})
            if n in (3, 6):
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
                print(s.getvalue()[-9000:])
    for key in list(verifier._baseline_ms)[:3]:
        print(key, verifier._baseline_ms[key])


if __name__ == "__main__":
    main()
