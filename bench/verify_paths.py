#!/usr/bin/env python3
"""Verification throughput, old path against new, on the same candidates (issue 16).

Part `paths`: the committed H200 runs (rmsnorm, softmax, attention) re-verified through
`kernelladder optimize OP --proposer replay --replay-from RUN`, their candidates dealt
round-robin over 3 branches (dealt_copy: the saved runs grew one branch longest, which
left one worker alone at the end), by the serial path (`--verify serial
--no-early-stop`: one worker per GPU, each candidate start to finish, the reference
timed every time), by the serial path again (the control: how often two runs of the
same path agree) and by the pipelined path (the default: workers sharing the GPU,
compile ahead, early stop). All with 3 branches, --no-confirm,
--profile off, a stagnation no branch reaches, each with its own empty compile caches
(so the second path finds nothing the first compiled). For each: attempts per minute (of the
run, from its start to its last verdict; and steady, first verdict to last), then per
candidate (matched by source hash) whether pass/fail agree, the standing against the
fastest baseline per (attempt, shape), and the run's best. Then a repeat check: the
pipelined best of the first op verified twice more by the pipelined path, its time per
shape compared.

Part `search`: a fresh 40-attempt rmsnorm search (search proposer, 3 branches,
--stagnation 40 so the branches do not stop first) with --time-limit S: when its 40th
verdict came.

    python3 bench/verify_paths.py [--parts paths search] [--ops rmsnorm softmax attention]
                                  [--control-ops rmsnorm softmax] [--out DIR]
                                  [--search-limit-s 150]

About 20 minutes on one H200 (more than one device call: bench/detached.sh).

Writes under --out (default $OUT): OP-serial/, OP-serial-again/ and OP-pipelined/ run dirs, their
stderr, results.json, table.txt (printed last). Needs a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = {
    "rmsnorm": "examples/h100-rmsnorm-search",
    "softmax": "examples/h100-softmax-search",
    "attention": "examples/h100-attention-search",
}
PATHS = {
    "serial": ["--verify", "serial", "--no-early-stop"],
    # the serial path again: how often two runs of the same path agree (the control)
    "serial-again": ["--verify", "serial", "--no-early-stop"],
    "pipelined": ["--verify", "pipelined"],
}
BRANCHES = 3


def dealt_copy(op: str, out: Path) -> Path:
    """The committed run's candidates dealt round-robin, in attempt order, over BRANCHES
    branch labels (its events reduced to what the replay proposer reads, its attempts'
    sources copied): every path verifies the same candidates, and no branch runs dry
    long before the others because the saved run happened to grow one branch longest."""
    saved = ROOT / RUNS[op]
    dest = out / f"dealt-{op}"
    (dest / "attempts").mkdir(parents=True, exist_ok=True)
    events = _events(saved)
    started = next(e for e in events if e["kind"] == "run_started")
    labels = [f"dealt-{i + 1}" for i in range(BRANCHES)]
    lines = [{"kind": "run_started", "seq": 0, "op": started.get("op"), "run_id": "dealt"}]
    for i, label in enumerate(labels):
        lines.append({"kind": "branch_opened", "seq": len(lines), "branch_id": f"b{i + 1}",
                      "strategy": label})  # fmt: skip
    proposals = sorted(
        (e for e in events if e["kind"] == "proposal_received"), key=lambda e: e["attempt"]
    )
    for i, e in enumerate(proposals):
        n = e["attempt"]
        (dest / "attempts" / f"{n}.py").write_text((saved / "attempts" / f"{n}.py").read_text())
        lines.append({**e, "seq": len(lines), "branch_id": f"b{i % BRANCHES + 1}",
                      "strategy": labels[i % BRANCHES]})  # fmt: skip
    (dest / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return dest


def _cli(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from kernelladder.cli import main; sys.exit(main())",
        *args,
    ]


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (run_dir / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]


def _rates(events: list[dict[str, Any]]) -> dict[str, Any]:
    start = next(e["ts"] for e in events if e["kind"] == "run_started")
    verdicts = [e for e in events if e["kind"] == "verdict_ready"]
    out: dict[str, Any] = {"attempts": len(verdicts)}
    if verdicts:
        span = verdicts[-1]["ts"] - start
        out["run_s"] = round(span, 1)
        out["per_min"] = round(60 * len(verdicts) / span, 1) if span > 0 else None
        if len(verdicts) > 1:
            steady = verdicts[-1]["ts"] - verdicts[0]["ts"]
            out["steady_per_min"] = round(60 * (len(verdicts) - 1) / steady, 1)
        out["early_stops"] = sum(1 for v in verdicts if v.get("early_stop") is not None)
        # the ramp: when each branch's first verdict came (a pipelined worker's first
        # timing compiles torch.compile's references); then the rate while every branch
        # had candidates (from the last first verdict to the first branch that ran dry)
        firsts: dict[str, float] = {}
        for v in verdicts:
            firsts.setdefault(str(v.get("branch_id")), v["ts"])
        out["first_verdicts_s"] = sorted(round(t - start, 1) for t in firsts.values())
        dry = [e["ts"] for e in events if e["kind"] == "branch_exhausted"]
        since, until = max(firsts.values()), min(dry) if dry else verdicts[-1]["ts"]
        inside = [v for v in verdicts if since < v["ts"] <= until]
        if inside and until > since:
            out["all_busy_per_min"] = round(60 * len(inside) / (until - since), 1)
    return out


def _source_hashes(events: list[dict[str, Any]]) -> dict[int, str]:
    """attempt -> the hash of its proposed source."""
    return {
        e["attempt"]: e.get("source_hash", "") for e in events if e["kind"] == "proposal_received"
    }


def _by_source(run_dir: Path, events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """source hash -> {attempt, verdict, standing per shape} (first verdict of a source)."""
    hashes = _source_hashes(events)
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["kind"] != "verdict_ready":
            continue
        digest = hashes.get(e["attempt"]) or ""
        if not digest:
            continue
        shapes = {k: (v or {}).get("standing") for k, v in (e.get("standing_shapes") or {}).items()}
        out.setdefault(
            digest,
            {
                "attempt": e["attempt"],
                "verdict": e["verdict"],
                "shapes": shapes,
                "early_stop": e.get("early_stop"),
                "vs_best": e.get("vs_best"),
            },
        )
    return out


def _best_source(run_dir: Path, events: list[dict[str, Any]]) -> tuple[int | None, str]:
    finished = [e for e in events if e["kind"] == "run_finished"]
    best = finished[-1].get("best_attempt") if finished else None
    hashes = _source_hashes(events)
    return best, hashes.get(best, "") if best is not None else ""


def run_path(op: str, path: str, out: Path, env: dict[str, str], limit_s: float) -> dict[str, Any]:
    saved = dealt_copy(op, out)
    saved_attempts = sum(1 for e in _events(saved) if e["kind"] == "proposal_received")
    run_dir = out / f"{op}-{path}"
    # each path starts with empty compile caches (Triton's, inductor's): the second run
    # must not find the first one's kernels compiled
    env = dict(env, XDG_CACHE_HOME=str(out / f"cache-{op}-{path}"))
    cmd = _cli(
        "optimize", op, "--proposer", "replay", "--replay-from", str(saved), "--branches", str(BRANCHES),
        "--max-attempts", str(saved_attempts), "--stagnation", "1000", "--gate", "approve",
        "--no-confirm", "--profile", "off", "--min-speedup", "0", "--time-limit", str(limit_s),
        "--run-dir", str(run_dir), *PATHS[path],
    )  # fmt: skip
    started = time.monotonic()
    with (out / f"{op}-{path}.stderr").open("w") as err:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT, timeout=limit_s + 120
        )
    wall = time.monotonic() - started
    events = _events(run_dir)
    result = {
        "op": op,
        "path": path,
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        **_rates(events),
    }
    result["best_attempt"], result["best_source"] = _best_source(run_dir, events)
    stages: dict[str, list[float]] = {}
    for f in sorted((run_dir / "attempts").glob("*.json")):
        for k, v in (json.loads(f.read_text()).get("stages") or {}).items():
            stages.setdefault(k, []).append(v)
    result["stage_median_s"] = {k: round(sorted(v)[len(v) // 2], 3) for k, v in stages.items()}
    print(f"{op} {path}: {json.dumps(result)}", flush=True)
    return result


def compare(
    op: str, out: Path, old: dict[str, Any], new: dict[str, Any], other: str = "pipelined"
) -> dict[str, Any]:
    """The serial run against `other` (the pipelined run, or the serial path again)."""
    a = _by_source(out / f"{op}-serial", _events(out / f"{op}-serial"))
    b = _by_source(out / f"{op}-{other}", _events(out / f"{op}-{other}"))
    other_path = other
    common = sorted(set(a) & set(b))
    verdict_same = sum(1 for h in common if a[h]["verdict"] == b[h]["verdict"])
    pairs = same = 0
    differ: list[str] = []
    for h in common:
        if a[h]["verdict"] != "pass" or b[h]["verdict"] != "pass":
            continue
        for shape, word in a[h]["shapes"].items():
            pairs += 1
            theirs = b[h]["shapes"].get(shape)
            if theirs == word:
                same += 1
            else:
                stop = " (stopped early)" if b[h]["early_stop"] is not None else ""
                differ.append(
                    f"serial #{a[h]['attempt']} / {other_path} #{b[h]['attempt']}{stop} {shape}: "
                    f"{word} -> {theirs}"
                )
    return {
        "op": op,
        "candidates": len(common),
        "only_serial": len(set(a) - set(b)),
        "only_pipelined": len(set(b) - set(a)),
        "verdicts_agree": f"{verdict_same}/{len(common)}",
        "standing_agree": f"{same}/{pairs}",
        "standing_agree_pct": round(100 * same / pairs, 1) if pairs else None,
        "same_best": bool(old["best_source"]) and old["best_source"] == new["best_source"],
        "best": f"serial #{old['best_attempt']} / {other} #{new['best_attempt']}",
        # both bests as the serial run measured them (vs best, geomean over shapes): how
        # far apart two different picks are by one run's own times
        "bests_in_serial_vs_best": [
            (a.get(old["best_source"]) or {}).get("vs_best"),
            (a.get(new["best_source"]) or {}).get("vs_best"),
        ],
        "standing_differences": differ,
    }


async def _repeat(op: str, source: str) -> list[dict[str, Any]]:
    from kernelladder.engine import LocalRunner, VerifyRequest

    runner = LocalRunner(device="cuda", per_gpu=2)
    await runner.start()
    try:
        out = []
        for _ in range(3):  # the first warms the worker's caches; the next two are compared
            v = await runner.verify(
                VerifyRequest(op=op, source=source, device="cuda", min_speedup=0.0, pipeline=True)
            )
            out.append({t.label: t.candidate_ms for t in v.timings})
        return out[1:]
    finally:
        await runner.close()


def repeat_check(op: str, out: Path, new: dict[str, Any]) -> dict[str, Any]:
    run_dir = out / f"{op}-pipelined"
    source = (run_dir / "attempts" / f"{new['best_attempt']}.py").read_text()
    first, second = asyncio.run(_repeat(op, source))
    diffs = {k: abs(second[k] / first[k] - 1) for k in first if first[k] and second.get(k)}
    geo = (
        math.exp(sum(math.log(second[k] / first[k]) for k in diffs) / len(diffs)) - 1
        if diffs
        else None
    )
    return {
        "op": op,
        "attempt": new["best_attempt"],
        "first_ms": first,
        "second_ms": second,
        "max_shape_diff_pct": round(100 * max(diffs.values()), 2) if diffs else None,
        "geomean_diff_pct": round(100 * geo, 2) if geo is not None else None,
    }


def fresh_search(out: Path, env: dict[str, str], limit_s: float) -> dict[str, Any]:
    run_dir = out / "rmsnorm-fresh40"
    cmd = _cli(
        "optimize", "rmsnorm", "--max-attempts", "40", "--branches", "3", "--stagnation", "40",
        "--gate", "approve", "--profile", "off", "--time-limit", str(limit_s), "--run-dir", str(run_dir),
    )  # fmt: skip
    with (out / "rmsnorm-fresh40.stderr").open("w") as err:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT, timeout=limit_s + 180
        )
    events = _events(run_dir)
    start = next(e["ts"] for e in events if e["kind"] == "run_started")
    verdicts = [e for e in events if e["kind"] == "verdict_ready"]
    finished = [e for e in events if e["kind"] == "run_finished"]
    confirmed = [e for e in events if e["kind"] == "best_confirmed"]
    return {
        "rc": proc.returncode,
        "attempts": len(verdicts),
        "time_limit_s": limit_s,
        "fortieth_verdict_s": round(verdicts[39]["ts"] - start, 1) if len(verdicts) >= 40 else None,
        "last_verdict_s": round(verdicts[-1]["ts"] - start, 1) if verdicts else None,
        "per_min": round(60 * len(verdicts) / (verdicts[-1]["ts"] - start), 1)
        if verdicts
        else None,
        "early_stops": sum(1 for v in verdicts if v.get("early_stop") is not None),
        "stop_rule": finished[-1].get("reason") if finished else None,
        "best_attempt": finished[-1].get("best_attempt") if finished else None,
        "best_vs_best": finished[-1].get("best_vs_best") if finished else None,
        "confirmed": [(c["attempt"], c["held"]) for c in confirmed],
        "run_finished_s": round(finished[-1]["ts"] - start, 1) if finished else None,
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| op | path | attempts | per min (run) | per min (steady) | per min (all branches busy) | first verdicts (s) | early stops | verdicts agree | standing agree | same best |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for op, r in results.get("paths", {}).items():
        for path in PATHS:
            if path not in r:
                continue
            p = r.get(path) or {}
            cmp_ = r.get({"pipelined": "compare", "serial-again": "control"}.get(path, ""), {})
            bests = cmp_.get("bests_in_serial_vs_best") or []
            by_serial = (
                f" (serial's vs best: {bests[0]:.4f} / {bests[1]:.4f})"
                if len(bests) == 2 and None not in bests and not cmp_.get("same_best")
                else ""
            )
            extra = (
                f"{cmp_.get('verdicts_agree')} | {cmp_.get('standing_agree')} ({cmp_.get('standing_agree_pct')}%) | {cmp_.get('same_best')}{by_serial}"
                if cmp_
                else " | | "
            )
            lines.append(
                f"| {op} | {path} | {p.get('attempts')} | {p.get('per_min')} | {p.get('steady_per_min')} | {p.get('all_busy_per_min')} | {p.get('first_verdicts_s')} | {p.get('early_stops')} | {extra} |"
            )
    rep = results.get("repeat")
    if rep:
        lines.append(
            f"\nrepeat check ({rep['op']} #{rep['attempt']}, pipelined, twice): max shape diff {rep['max_shape_diff_pct']}%, geomean {rep['geomean_diff_pct']}%"
        )
    s = results.get("search")
    if s:
        lines.append(
            f"\nfresh rmsnorm search: {s['attempts']} attempts, 40th verdict at {s['fortieth_verdict_s']} s "
            f"(limit {s['time_limit_s']} s), {s['per_min']}/min, {s['early_stops']} early stops, best #{s['best_attempt']} "
            f"vs best {s['best_vs_best']}, confirmed {s['confirmed']}, run finished at {s['run_finished_s']} s"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", nargs="+", default=["paths", "search"])
    ap.add_argument("--ops", nargs="+", default=list(RUNS))
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/verify_paths")
    ap.add_argument("--no-repeat", dest="repeat", action="store_false")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    # the control (serial-again) only for these ops: attention's serial path alone takes
    # about 4 minutes of a session's 30 (and its standings agreed at 96 % before)
    ap.add_argument("--control-ops", nargs="*", default=["rmsnorm", "softmax"])
    ap.add_argument("--search-limit-s", type=float, default=150.0)
    ap.add_argument("--path-limit-s", type=float, default=300.0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PYTHONUNBUFFERED="1",
    )
    results: dict[str, Any] = {"paths": {}}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=1))

    if "paths" in args.parts:
        for op in args.ops:
            r: dict[str, Any] = {}
            for path in args.paths:
                if path == "serial-again" and op not in args.control_ops:
                    continue
                try:
                    r[path] = run_path(op, path, out, env, args.path_limit_s)
                except Exception as exc:
                    r[path] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"{op} {path}: {r[path]['error']}", flush=True)
            done = {p for p in r if "error" not in r[p]}
            if {"serial", "pipelined"} <= done:
                r["compare"] = compare(op, out, r["serial"], r["pipelined"])
                print(f"{op} compare: {json.dumps(r['compare'])}", flush=True)
            if {"serial", "serial-again"} <= done:
                r["control"] = compare(
                    op, out, r["serial"], r["serial-again"], other="serial-again"
                )
                print(f"{op} control: {json.dumps(r['control'])}", flush=True)
            results["paths"][op] = r
            save()
        first = results["paths"].get(args.ops[0], {}).get("pipelined", {})
        if first.get("best_attempt") is not None and args.repeat:
            try:
                results["repeat"] = repeat_check(args.ops[0], out, first)
            except Exception as exc:
                print(f"repeat check: {type(exc).__name__}: {exc}", flush=True)
            save()
    if "search" in args.parts:
        try:
            results["search"] = fresh_search(out, env, args.search_limit_s)
        except Exception as exc:
            print(f"search: {type(exc).__name__}: {exc}", flush=True)
        save()
    text = table(results)
    (out / "table.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
