"""A warm verifier worker's cost per verification, without a GPU: one CPU worker (the
Triton interpreter) verifies the same candidate N times; prints the median seconds a
verification took (each verdict's elapsed_s) and the worker's CPU seconds per
verification (its user + system time over the loop, from /proc).

    PYTHONPATH=$PWD python3 bench/warm_verify_loop.py [--op rmsnorm] [--n 20] [CANDIDATE]

The candidate defaults to the op's starting candidate. To compare two checkouts side by
side on a shared machine, run it under each in turn (farm-bench --vs does the pairing):

    farm-bench -n 5 --vs "env PYTHONPATH=/path/to/main python3 bench/warm_verify_loop.py" \\
        -- env PYTHONPATH=$PWD python3 bench/warm_verify_loop.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

from kernelladder.ops.registry import get_op
from kernelladder.verifier.host.client import LocalTransport, WorkerClient


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(op: str, source: str, n: int) -> None:
    client = WorkerClient(lambda: LocalTransport("cpu"), secrets=[])
    try:
        request = {"op": op, "source": source, "device": "cpu"}
        first = await client.verify(request, timeout_s=300)  # the worker's start, not counted
        pid = client.worker_pid
        cpu0 = _cpu_seconds(pid) if pid else None
        elapsed = []
        for _ in range(n):
            verdict = await client.verify(request, timeout_s=300)
            if verdict.verdict != first.verdict or client.worker_pid != pid:
                sys.exit(f"the verdicts changed or the worker was replaced: {verdict.gate}")
            elapsed.append(verdict.elapsed_s)
        cpu = (_cpu_seconds(pid) - cpu0) / n if cpu0 is not None else float("nan")
        print(
            f"{op}: {first.verdict} x{n}; median {statistics.median(elapsed):.3f} s per "
            f"verification (min {min(elapsed):.3f}, max {max(elapsed):.3f}); "
            f"worker CPU {cpu:.3f} s per verification"
        )
    finally:
        await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("candidate", nargs="?", help="candidate file (default: the op's start)")
    parser.add_argument("--op", default="rmsnorm")
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args()
    path = args.candidate or get_op(args.op).starting_candidate
    asyncio.run(main(args.op, Path(path).read_text(), args.n))
