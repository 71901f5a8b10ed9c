"""Key-press latency of kernelladder-tui under load.

A scripted engine (kernelladder.app.scripted.ScriptedRun, a test double: exact,
repeatable events) emits RATE events a second for SECONDS seconds into the real bridge
and app (headless, 160x48); a key is pressed every 100 ms and timed until the app has
acted on it. Prints the latency percentiles and checks that every event was folded.

    python bench/tui_load.py [--rate 5000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys

from kernelladder.app.scripted import measure_load, percentiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure_load(rate=args.rate, seconds=args.seconds))
    lat = result.pop("latencies_ms")
    result["presses"] = len(lat)
    result["latency_ms"] = {f"p{k}": round(v, 1) for k, v in percentiles(lat).items()}
    result["python"] = platform.python_version()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"python {result['python']}, {args.rate:g} events/s for {args.seconds:g} s")
        print(
            f"events emitted {result['events_emitted']}, folded {result['events_folded']} "
            f"in {result['batches']} batches (largest {result['largest_batch']})"
        )
        print(
            f"key-press latency over {len(lat)} presses: "
            + ", ".join(f"{k} {v} ms" for k, v in result["latency_ms"].items())
        )
    return 0 if result["events_folded"] == result["events_emitted"] else 1


if __name__ == "__main__":
    sys.exit(main())
