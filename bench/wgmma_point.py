#!/usr/bin/env python3
"""Writes flash-wgmma's candidate for one point: JSON parameters over the family's start
(bench/attention_points.sh and bench/attention_stalls.sh render their points with it).
An invalid point is one line and exit code 2.

    python3 bench/wgmma_point.py '{"PINGPONG": true}' candidate.py
"""

from __future__ import annotations

import json
import sys

from kernelladder.ops.registry import catalog


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    family = next(f for f in catalog()["attention"] if f.name == "flash-wgmma")
    point = {**family.start, **json.loads(sys.argv[1])}
    if not family.valid(point):
        print(f"not a valid flash-wgmma point: {sys.argv[1]}", file=sys.stderr)
        return 2
    with open(sys.argv[2], "w") as f:
        f.write(family.render(point))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
