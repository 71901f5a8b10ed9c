"""Summarises one Nsight Compute report of a kernel (bench/attention_stalls.sh): from the raw
page its duration, clock, tensor-pipe activity, L2 and DRAM throughput and warp-stall
ratios; from the source page (SASS: the "Source" and "Warp Stall Sampling (All Samples)"
columns, and the stall_<reason> ones) the samples by opcode and the instructions holding
the most, each with its top stall columns.

    python3 bench/attention_stalls_summary.py SASS_CSV RAW_CSV [--top N]
"""

from __future__ import annotations

import argparse
import csv
import re
import sys


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def raw_summary(path: str) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3:
        print(f"raw page: {len(rows)} rows, nothing to read")
        return
    header, units, values = rows[0], rows[1], rows[-1]
    print("kernel:", values[header.index("Kernel Name")] if "Kernel Name" in header else "?")
    wanted = re.compile(
        r"gpu__time_duration\.sum$|tensor.*pct_of_peak|sm__throughput\.avg\.pct"
        r"|cycles_elapsed\.avg\.per_second$|smsp__cycles_active\.avg$"
        r"|lts__throughput\.avg\.pct|lts__t_bytes\.sum\.per_second$"
        r"|dram__throughput\.avg\.pct|l1tex__m_xbar2l1tex_read_bytes\.sum\.per_second$"
    )
    for name, unit, value in zip(header, units, values, strict=False):
        if wanted.search(name):
            print(f"  {name} = {value} {unit}")
    stalls = []
    for name, value in zip(header, values, strict=False):
        m = re.match(r"smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$", name)
        if m and _number(value) is not None:
            stalls.append((_number(value), m.group(1)))
    print("  stalls per issue:", ", ".join(f"{r} {v:.2f}" for v, r in sorted(stalls)[::-1][:10]))


def sass_summary(path: str, top: int) -> None:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # the header: the first row naming a source column
    start = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if start is None:
        print(f"source page: no header among {len(rows)} rows; first: {rows[:2]}")
        return
    header = rows[start]
    body = [r for r in rows[start + 1 :] if len(r) == len(header)]
    src = header.index("Source")
    total_col = next((i for i, h in enumerate(header) if "All Samples" in h), None)
    print(f"source page: {len(body)} instructions; columns: {header}")
    if total_col is None:
        return
    stall_cols = [
        i
        for i, h in enumerate(header)
        if i not in (total_col, src) and re.search(r"stall", h, re.I) and "Not-issued" not in h
    ]
    samples = [(_number(r[total_col]) or 0.0, n, r) for n, r in enumerate(body)]
    whole = sum(s for s, _, _ in samples) or 1.0
    print(f"samples: {whole:.0f}")
    # by opcode (predicate and modifiers dropped): BAR (warpgroup barriers), SYNCS
    # (mbarrier waits and arrives), WARPGROUP (wgmma waits), HGMMA, MUFU ...
    by_op: dict[str, float] = {}
    for s, _, r in samples:
        words = [w for w in r[src].split() if not w.startswith("@")]
        op = words[0].split(".")[0] if words else "?"
        by_op[op] = by_op.get(op, 0.0) + s
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1])[:12]
    print("by opcode:", ", ".join(f"{op} {100 * v / whole:.1f}%" for op, v in ranked))
    for s, n, r in sorted(samples, reverse=True)[:top]:
        parts = sorted(((_number(r[i]) or 0.0, header[i]) for i in stall_cols), reverse=True)[:3]
        why = ", ".join(f"{h.split('(')[0].strip()[-28:]} {v:.0f}" for v, h in parts if v)
        print(f"{100 * s / whole:5.1f}% #{n:<5} {r[src][:60]:60} {why}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass_csv")
    parser.add_argument("raw_csv")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    for fn, path in ((raw_summary, args.raw_csv), (sass_summary, args.sass_csv)):
        try:
            fn(path) if fn is raw_summary else fn(path, args.top)
        except (OSError, ValueError, IndexError) as e:
            print(f"{path}: {type(e).__name__}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
