#!/usr/bin/env python3
"""GPU smoke test of the search's templates: every family's starting point of every op,
verified on the GPU suite through one warm worker (baselines off), so a template that
only breaks on real hardware shows up before a long run.

    PYTHONPATH=. python3 bench/gpu_search_smoke.py [--budget S] [--device cuda]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelladder.ops.attention import families as attention  # noqa: E402
from kernelladder.ops.int8_matmul import families as int8_matmul  # noqa: E402
from kernelladder.ops.kv_quant import families as kv_quant  # noqa: E402
from kernelladder.ops.rmsnorm import families as rmsnorm  # noqa: E402
from kernelladder.ops.softmax import families as softmax  # noqa: E402
from kernelladder.verifier.host.client import LocalTransport, WorkerClient  # noqa: E402

MODULES = (rmsnorm, softmax, kv_quant, int8_matmul, attention)


async def main_async(args: argparse.Namespace) -> int:
    started = time.monotonic()
    client = WorkerClient(lambda: LocalTransport(args.device))
    rows, records = [], []
    try:
        for mod in MODULES:
            for fam in mod.FAMILIES:
                if time.monotonic() - started > args.budget:
                    rows.append((fam.op, fam.name, "skipped (out of time)", "", ""))
                    continue
                source = fam.render(dict(fam.start))
                request = {
                    "op": fam.op,
                    "source": source,
                    "device": args.device,
                    "suite": "gpu" if args.device == "cuda" else "cpu",
                    "baselines": False,
                }
                v = await client.verify(request, timeout_s=120)
                detail = "" if v.passed else (v.gates.get(v.gate).detail if v.gate else "")
                sp = f"{v.speedup:.2f}x" if v.speedup else "-"
                ff = f"{v.floor_fraction:.0%}" if v.floor_fraction else "-"
                rows.append(
                    (
                        fam.op,
                        fam.name,
                        v.verdict,
                        f"{sp} floor {ff} {v.elapsed_s:.1f}s",
                        detail[:160],
                    )
                )
                records.append({"op": fam.op, "family": fam.name, "verdict": v.to_dict()})
                print(*rows[-1], flush=True)
    finally:
        await client.close()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "search_smoke.json").write_text(json.dumps(records, indent=1))
    print("\n| op | family | verdict | speed | detail |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget", type=float, default=150.0)
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
