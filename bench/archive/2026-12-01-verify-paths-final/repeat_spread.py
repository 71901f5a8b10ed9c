#!/usr/bin/env python3
"""How far one candidate's times move between verifications: SOURCE verified N+1 times by
one warm pipelined worker (the first warms its caches), per shape the candidate's
median, the spread of the N (max / min - 1) beside the candidate's own noise (IQR /
median of its trials), and per verification the geomean speedup against the reference.

    PYTHONPATH=. python3 bench/archive/2026-12-01-verify-paths-final/repeat_spread.py SOURCE [N]
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


async def main(source: str, n: int) -> None:
    from kernelladder.engine.protocols import VerifyRequest
    from kernelladder.engine.runners.local import LocalRunner

    runner = LocalRunner(device="cuda", per_gpu=2)
    await runner.start()
    try:
        runs = []
        for i in range(n + 1):
            v = await runner.verify(
                VerifyRequest(
                    op="rmsnorm", source=source, device="cuda", min_speedup=0.0, pipeline=True
                )
            )
            if i:
                runs.append(v)
            print(f"verification {i}: {v.verdict} speedup {v.speedup}", flush=True)
    finally:
        await runner.close()
    labels = [t.label for t in runs[0].timings]
    print(f"{'shape':<20} {'medians (ms)':<60} spread  own noise")
    for label in labels:
        ms = [next(t.candidate_ms for t in v.timings if t.label == label) for v in runs]
        noise = [next(t.noise for t in v.timings if t.label == label) or 0.0 for v in runs]
        spread = max(ms) / min(ms) - 1
        print(
            f"{label:<20} {' '.join(f'{m:.5f}' for m in ms):<60} {100 * spread:5.2f}%"
            f"  {100 * min(noise):.1f}-{100 * max(noise):.1f}%"
        )
    geo = [v.speedup for v in runs if v.speedup]
    if geo:
        print(
            f"geomean speedup per verification: {' '.join(f'{g:.4f}' for g in geo)}; "
            f"spread {100 * (max(geo) / min(geo) - 1):.2f}%"
        )
    for a, b in zip(runs, runs[1:], strict=False):
        diffs = [
            abs(tb.candidate_ms / ta.candidate_ms - 1)
            for ta, tb in zip(a.timings, b.timings, strict=True)
            if ta.candidate_ms and tb.candidate_ms
        ]
        logs = [
            math.log(tb.candidate_ms / ta.candidate_ms)
            for ta, tb in zip(a.timings, b.timings, strict=True)
            if ta.candidate_ms and tb.candidate_ms
        ]
        print(
            f"consecutive pair: max shape diff {100 * max(diffs):.2f}%, "
            f"geomean {100 * (math.exp(sum(logs) / len(logs)) - 1):+.2f}%"
        )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]).read_text(), int(sys.argv[2]) if len(sys.argv) > 2 else 5))
