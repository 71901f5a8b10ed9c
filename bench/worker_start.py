#!/usr/bin/env python3
"""Where a run's start goes: the verifier workers started as a default run starts them
(every worker of the GPU at once), each one's seconds per step of its start from its
hello (imports, the device, the self-test, the ops and the walls, torch.compile's first
use, the verifier), then one more worker alone (the end's re-measure starts one so).

    python3 bench/worker_start.py [--device cuda] [--workers N] [--rounds R --pause-s S]

Run it twice on one box for a cold and a warm start (Triton's and inductor's caches).
With worker templates on (KERNELLADDER_WORKER_TEMPLATE=1 on a GPU; on by default on
the CPU), the first round's first worker starts the template and a later round's
workers are forked from it (`--rounds 2`, S seconds apart for the template's imports).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def _start(device: str, workers: int) -> None:
    from kernelladder.verifier.host.pool import LocalPool

    pool = LocalPool(device, 1, per_gpu=workers)
    began = time.monotonic()
    try:
        hellos = await pool.start()
        print(f"{workers} workers at once: up in {time.monotonic() - began:.2f} s")
        for hello in hellos:
            print("  " + json.dumps(hello.get("setup_s")))
    finally:
        await pool.close()
    alone = LocalPool(device, 1, per_gpu=1)
    began = time.monotonic()
    try:
        hellos = await alone.start()
        print(f"1 worker alone: up in {time.monotonic() - began:.2f} s")
        print("  " + json.dumps(hellos[0].get("setup_s")))
    finally:
        await alone.close()


def main() -> int:
    from kernelladder.engine import RunOptions

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=None, help="default: as a run picks")
    p.add_argument("--rounds", type=int, default=1, help="measure this many times")
    p.add_argument("--pause-s", type=float, default=20.0, help="between rounds")
    args = p.parse_args()
    workers = args.workers or RunOptions(op="rmsnorm").worker_count()
    for round_ in range(args.rounds):
        if round_:
            time.sleep(args.pause_s)
        print(f"round {round_ + 1}:")
        asyncio.run(_start(args.device, workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
