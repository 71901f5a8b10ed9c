#!/usr/bin/env python3
"""Attempts per minute of a default run (issue 25): profiling on, the end's re-measure on.

For each op, in sequence, one command as a new user types it:

    kernelladder optimize OP --device cuda --max-attempts 40 --gate approve --run-dir DIR

and from the run's event log (events.jsonl):

    per min, whole run      verdicts / the command's wall clock (bench.json beside the
                            log; for a saved run without one, RunStarted to RunFinished)
    per min, active         verdicts / first AttemptStarted to last VerdictReady
    profiles, GPU s/prof    ProfileReady count; the seconds each held the GPU to itself
                            (ProfileReady.gpu_s; older logs, which held it for the whole
                            profile, by the time from the verdict it followed to
                            ProfileReady, marked ~)
    s/re-measure            the first "re-measuring #n" notice to the last BestConfirmed,
                            over the attempts re-measured
    first verdict s         the command's start (RunStarted in a saved run) to the first
                            VerdictReady
    where the time goes     per op, each stage's median seconds and its costliest parts
                            (the verdicts' stage_parts: calls, inputs, the reference
                            again, fingerprints, comparisons, digests, audits by depth...)

Goal (issue 25): whole run >= 40/min for rmsnorm, softmax, kv_quant and int8_matmul,
>= 30 for attention; active >= 60; a profile ~1 s of GPU; <= 8 s per re-measured
attempt; first verdict <= 8 s on a warm box.

Run on one H200 in one command (about 9 minutes for the five ops; --ops picks fewer):

    python3 bench/default_rate.py [--ops rmsnorm softmax kv_quant int8_matmul attention]
                                  [--again rmsnorm] [--attempts 40] [--budget-s 540]
                                  [--out DIR]

--again runs the ops it names once more after the others, on the box they warmed
(Triton's, inductor's and the GPU rates' caches filled, the verifier workers the run
before kept warm): the warm box of the first verdict's goal. Every command after the
first takes the workers the one before kept (`--keep-workers`, on by default on a GPU;
the "kept workers" column); KERNELLADDER_KEEP_WORKERS=0 makes every command start its own.
The keeper is stopped at the end.

The same table from saved run directories (a "before" from older logs, e.g. examples/):

    python3 bench/default_rate.py --from-runs examples/h100-attention-search ...

With --control each op's default run is followed by the same command with --profile off
--no-confirm, and a second table compares the best standings (the same word per shape,
vs best within the noise) and lists the default run's re-measure verdicts (about twice
the time: e.g. --ops rmsnorm kv_quant --control fits in 9 minutes). On a machine with
several GPUs, --gpus 1 and then --gpus 2 (two commands) give the scaling.

Writes under --out (default $OUT, else ./default-rate-out): runs.tar.gz (every run dir,
with the command's output, without the .ncu-rep reports unless --keep-reports),
results.json and table.txt, the table printed last. Needs a GPU, torch, triton, rich,
networkx and Nsight Compute (ncu) for the profiles; the package is run from this
checkout (PYTHONPATH is set to it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OPS = ("rmsnorm", "softmax", "kv_quant", "int8_matmul", "attention")
GOAL_WHOLE = {"attention": 30.0}  # per min over the whole run; the others 40
GOAL_WHOLE_DEFAULT = 40.0
GOAL_ACTIVE = 60.0
MIN_START_S = 45.0  # an op is not started with less of the budget left
STOP_GRACE_S = 20.0  # a run past its time stops (Ctrl-C) within this, or is killed


def _events(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    path = run_dir / "events.jsonl"
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line
    return out


def _mean(values: list[float]) -> float | None:
    return statistics.mean(values) if values else None


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    start = None
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    return total + (end - start if end is not None else 0.0)


def gpu_use(events: list[dict[str, Any]], run_dir: Path) -> tuple[float, float]:
    """Seconds the GPU was held to itself (each attempt's speed stage, which ends at its
    verdict; profile replays: ProfileReady's gpu_s) and held at all (each attempt's
    correctness too, which ends where its timing asks for the GPU), as unions over the
    workers: the stages' seconds from each attempt's verdict (attempts/N.json), placed
    by its verdict and its 'waiting for the GPU (to itself)' line (the progress lines
    between are thinned in the log, so they place nothing)."""
    alone: list[tuple[float, float]] = []
    shared: list[tuple[float, float]] = []
    asked: dict[Any, float] = {}
    for e in events:
        text = str(e.get("message", ""))
        if e.get("kind") == "attempt_progress" and text.startswith(
            "waiting for the GPU (to itself)"
        ):
            asked.setdefault(e.get("attempt"), e["ts"])
    for e in events:
        if e.get("kind") != "verdict_ready" or e.get("attempt") is None:
            continue
        path = run_dir / "attempts" / f"{e['attempt']}.json"
        try:
            stages = json.loads(path.read_text()).get("stages") or {}
        except (OSError, ValueError):
            continue
        speed, correct = float(stages.get("speed") or 0), float(stages.get("correctness") or 0)
        end = e["ts"] - float(stages.get("audit") or 0)  # the final audit holds no GPU
        if speed:
            alone.append((end - speed, end))
        at = asked.get(e["attempt"])
        if correct and at is not None:
            shared.append((at - correct, at))
    for p in events:
        if p.get("kind") == "profile_ready" and isinstance(p.get("gpu_s"), int | float):
            alone.append((p["ts"] - float(p["gpu_s"]), p["ts"]))
    return _union_s(alone), _union_s(alone + shared)


def verification_costs(run_dir: Path) -> dict[str, Any]:
    """Where a verification's time goes, from every attempt's verdict (attempts/N.json):
    each stage's median seconds, and each stage's parts (the verdict's stage_parts: the
    candidate's calls, the inputs drawn, the reference computed again, its fingerprint,
    comparisons, digests, integrity checks, audits of torch's state by depth, timings)
    as mean seconds and times per verification."""
    stages: dict[str, list[float]] = {}
    parts: dict[str, list[float]] = {}
    verdicts = 0
    for path in (run_dir / "attempts").glob("*.json"):
        if not path.stem.isdigit():
            continue
        try:
            verdict = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        verdicts += 1
        for name, seconds in (verdict.get("stages") or {}).items():
            stages.setdefault(name, []).append(float(seconds))
        for name, (seconds, times) in (verdict.get("stage_parts") or {}).items():
            total = parts.setdefault(name, [0.0, 0.0])
            total[0] += float(seconds)
            total[1] += float(times)
    return {
        "verdicts": verdicts,
        "stages": {k: statistics.median(v) for k, v in stages.items()},
        "parts": {k: (v[0] / verdicts, v[1] / verdicts) for k, v in parts.items()}
        if verdicts
        else {},
    }


def costs_table(rows: list[dict[str, Any]]) -> str:
    """Each op's stages (median s) and its costliest parts (mean s and times per verdict)."""
    lines = [
        "where a verification's time goes (stages: median s; parts: mean s x times per verdict)"
    ]
    for r in rows:
        costs = r.get("costs") or {}
        if not costs.get("verdicts"):
            continue
        order = ("baselines", "references", "compile", "wait", "correctness", "speed", "audit")
        stages = sorted(
            costs["stages"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9
        )
        lines.append(f"{r['op']}: " + ", ".join(f"{k} {v:.2f}" for k, v in stages))
        top = sorted(costs["parts"].items(), key=lambda kv: -kv[1][0])[:14]
        for k in range(0, len(top), 4):
            lines.append(
                "    " + "; ".join(f"{name} {s:.3f} x{n:.1f}" for name, (s, n) in top[k : k + 4])
            )
    return "\n".join(lines) if len(lines) > 1 else ""


def repeated_kernels(events: list[dict[str, Any]]) -> int:
    """Attempts whose source is an earlier attempt's of the same run, byte for byte (the
    log's source hashes): kernels verified a second time."""
    seen: set[str] = set()
    repeats = 0
    for e in events:
        if e.get("kind") != "proposal_received" or not e.get("source_hash"):
            continue
        repeats += e["source_hash"] in seen
        seen.add(e["source_hash"])
    return repeats


def measure(run_dir: Path) -> dict[str, Any]:
    """The table's figures for one run directory, from its event log (and bench.json,
    the command's own wall clock, when this script ran it)."""
    events = _events(run_dir)
    bench = {}
    if (run_dir / "bench.json").exists():
        bench = json.loads((run_dir / "bench.json").read_text())
    kinds: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        kinds.setdefault(e.get("kind", ""), []).append(e)
    started = kinds.get("run_started", [{}])[0]
    op = started.get("op") or bench.get("op") or run_dir.name
    verdicts = kinds.get("verdict_ready", [])
    attempts = kinds.get("attempt_started", [])
    finished = kinds.get("run_finished", [])
    row: dict[str, Any] = {"op": op, "run_dir": str(run_dir), "verdicts": len(verdicts)}
    row["gpus"] = bench.get("gpus")
    row["exit"] = bench.get("exit")
    row["repeats"] = repeated_kernels(events)
    row["costs"] = verification_costs(run_dir)
    if not verdicts or not attempts:
        return row
    first_start = min(e["ts"] for e in attempts)
    last_verdict = max(e["ts"] for e in verdicts)
    first_verdict = min(e["ts"] for e in verdicts)
    active = last_verdict - first_start
    row["active_per_min"] = 60.0 * len(verdicts) / active if active > 0 else None
    if bench.get("wall_s"):
        whole, origin = float(bench["wall_s"]), float(bench["started_at"])
        row["whole_from"] = "command"
    elif finished and started:
        whole, origin = finished[-1]["ts"] - started["ts"], started["ts"]
        row["whole_from"] = "log"
    else:
        whole, origin = None, started.get("ts")
    row["whole_s"] = whole
    row["whole_per_min"] = 60.0 * len(verdicts) / whole if whole else None
    row["first_verdict_s"] = first_verdict - origin if origin else None
    # where the whole run's time goes: before the first attempt starts, after the last verdict
    row["start_s"] = first_start - origin if origin else None
    alone_s, held_s = gpu_use(events, run_dir)
    row["gpu_alone_share"] = alone_s / active if active > 0 else None
    row["gpu_held_share"] = held_s / active if active > 0 else None
    row["end_s"] = whole - (last_verdict - origin) if whole and origin else None
    # profiles: the GPU held to itself per profile
    profiles = [p for p in kinds.get("profile_ready", []) if p.get("status") == "ok"]
    row["profiles"] = len(profiles)
    row["profiles_failed"] = len(kinds.get("profile_ready", [])) - len(profiles)
    gpu = [float(p["gpu_s"]) for p in profiles if isinstance(p.get("gpu_s"), int | float)]
    if gpu:
        row["gpu_s_per_profile"], row["gpu_s_estimated"] = _mean(gpu), False
    elif profiles:  # an older log: the profile held the GPU from its verdict to its end
        spans = []
        for p in profiles:
            before = [v["ts"] for v in verdicts if v["ts"] <= p["ts"]]
            if before:
                spans.append(p["ts"] - max(before))
        row["gpu_s_per_profile"], row["gpu_s_estimated"] = _mean(spans), True
    shared = [float(p["shared_s"]) for p in profiles if isinstance(p.get("shared_s"), int | float)]
    row["shared_s_per_profile"] = _mean(shared)  # the warm-up's GPU beside correctness
    walls = [float(p["wall_s"]) for p in profiles if isinstance(p.get("wall_s"), int | float)]
    row["profile_wall_s"] = _mean(walls)
    row["profiles_skipped"] = sum(
        1 for n in kinds.get("notice", []) if "profile of #" in str(n.get("message", ""))
    )
    # workers kept from the command before (verifier/host/keeper.py): no start to wait for
    took = [TOOK.match(str(n.get("message", ""))) for n in kinds.get("notice", [])]
    row["kept_workers"] = sum(int(m.group(1)) for m in took if m)
    # new workers: where the slowest one's start went (its hello, said in the run's notice)
    row["worker_start"] = next(
        (
            str(n["message"])
            for n in kinds.get("notice", [])
            if str(n.get("message", "")).startswith("verifier workers started in")
        ),
        None,
    )
    # the end's re-measure
    confirmed = kinds.get("best_confirmed", [])
    remeasure_start = [
        n["ts"]
        for n in kinds.get("notice", [])
        if str(n.get("message", "")).startswith("re-measuring #")
    ]
    row["remeasured"] = len(confirmed)
    if confirmed and remeasure_start:
        span = max(c["ts"] for c in confirmed) - min(remeasure_start)
        row["s_per_remeasure"] = span / len(confirmed)
        row["held"] = [bool(c.get("held")) for c in confirmed]
        row["confirm_rounds"] = [
            sorted({int(s.get("rounds") or 0) for s in (c.get("shapes") or {}).values()})
            for c in confirmed
        ]
    if finished:
        best = finished[-1].get("best_attempt")
        row["best_attempt"] = best
        row["best_vs_best"] = finished[-1].get("best_vs_best")
        row["reason"] = finished[-1].get("reason")
        judged = [v for v in verdicts if v.get("attempt") == best]
        if judged:
            row["best_standing"] = judged[-1].get("standing") or ""
            row["best_noise"] = judged[-1].get("noise")
            row["best_shapes"] = {
                label: r.get("standing")
                for label, r in (judged[-1].get("standing_shapes") or {}).items()
            }
    row["confirmed"] = [
        {"attempt": c.get("attempt"), "held": c.get("held"), "vs_best": c.get("vs_best")}
        for c in confirmed
    ]
    return row


CONTROL_ARGS = ("--profile", "off", "--no-confirm")
TOOK = re.compile(r"took (\d+) verifier workers?")


def run_op(
    op: str,
    attempts: int,
    out: Path,
    timeout_s: float,
    extra: tuple[str, ...] = (),
    gpus: int | None = None,
    suffix: str = "",
) -> Path:
    name = op + ("-profile-off" if extra else "") + (f"-{gpus}gpu" if gpus else "") + suffix
    run_dir = out / "runs" / name
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if gpus:  # the runner takes every visible GPU
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    cmd = [
        sys.executable, "-m", "kernelladder", "optimize", op, "--device", "cuda",
        "--max-attempts", str(attempts), "--gate", "approve", "--run-dir", str(run_dir),
        *extra,
    ]  # fmt: skip
    log = out / "runs" / f"{run_dir.name}.out.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        # its own process group: on the time limit the run is stopped as Ctrl-C stops it
        # (its log finished), then the group killed, so no worker outlives it on the GPU
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=out, start_new_session=True
        )
        try:
            code: int | str = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = "timeout"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group
        proc.wait()
    wall = time.monotonic() - t0
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "bench.json").write_text(
        json.dumps(
            {
                "op": op,
                "command": cmd,
                "exit": code,
                "wall_s": wall,
                "started_at": started,
                "gpus": gpus,
            }
        )  # fmt: skip
    )
    print(f"{op}: exit {code} after {wall:.1f} s", file=sys.stderr, flush=True)
    return run_dir


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'op':<12} {'verdicts':>8} {'/min whole':>10} {'/min active':>11} {'profiles':>8} "
        f"{'GPU s/prof':>10} {'s/re-meas':>9} {'1st verdict s':>13}  goal"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        goal = GOAL_WHOLE.get(r["op"].split()[0], GOAL_WHOLE_DEFAULT)
        met = [] if r.get("exit") in (0, None) else [f"exit {r['exit']} (see runs/*.out.txt)"]
        if r.get("whole_per_min") is not None:
            met.append("whole " + ("met" if r["whole_per_min"] >= goal else f"< {goal:.0f}"))
        if r.get("active_per_min") is not None:
            ok = r["active_per_min"] >= GOAL_ACTIVE
            met.append("active " + ("met" if ok else f"< {GOAL_ACTIVE:.0f}"))
        gpu = _fmt(r.get("gpu_s_per_profile"), 2)
        if r.get("gpu_s_estimated") and gpu != "n/a":
            gpu = "~" + gpu
        whole = _fmt(r.get("whole_per_min"))
        if r.get("whole_from") == "log":
            whole += "*"
        lines.append(
            f"{r['op']:<12} {r['verdicts']:>8} {whole:>10} {_fmt(r.get('active_per_min')):>11} "
            f"{r.get('profiles', 0):>8} {gpu:>10} {_fmt(r.get('s_per_remeasure')):>9} "
            f"{_fmt(r.get('first_verdict_s')):>13}  {', '.join(met)}"
        )
    lines.append("")
    head = (
        f"{'op':<12} {'start s':>8} {'active s':>9} {'end s':>6} {'shared s/prof':>13} "
        f"{'prof wall s':>11} {'kept workers':>12} {'GPU alone %':>11} {'GPU held %':>10} "
        f"{'repeats':>7}"
    )
    lines += [head, "-" * len(head)]
    for r in rows:
        active = r["verdicts"] / r["active_per_min"] * 60 if r.get("active_per_min") else None
        lines.append(
            f"{r['op']:<12} {_fmt(r.get('start_s')):>8} {_fmt(active):>9} "
            f"{_fmt(r.get('end_s')):>6} {_fmt(r.get('shared_s_per_profile'), 2):>13} "
            f"{_fmt(r.get('profile_wall_s')):>11} {_fmt(r.get('kept_workers')):>12} "
            f"{_pct(r.get('gpu_alone_share')):>11} {_pct(r.get('gpu_held_share')):>10} "
            f"{_fmt(r.get('repeats'), 0):>7}"
        )
    lines.append(
        "* whole run from the log (RunStarted to RunFinished): the command's start-up is not in it"
    )
    lines.append("~ GPU s/profile of an older log: the verdict it followed to ProfileReady")
    for r in rows:  # a command that started its own workers: where their start went
        if r.get("worker_start"):
            lines.append(f"{r['op']}: {r['worker_start']}")
    lines.append("repeats: attempts whose kernel (source) an earlier attempt of the run had been")
    lines.append(
        "GPU alone / held: of the active time, the GPU held to itself (timings, profile "
        "replays) / held at all (correctness too)"
    )
    return "\n".join(lines)


def comparison(rows: list[dict[str, Any]], controls: list[dict[str, Any]]) -> str:
    """The default runs' best standing and re-measures against the control runs'
    (--profile off --no-confirm) best: the same words per shape, vs best within the
    larger of the two bests' noise (at least 1 %)."""
    by_op = {c["op"]: c for c in controls}
    lines = [
        f"{'op':<12} {'default best':<34} {'re-measured':<22} {'control best':<34} same?",
    ]
    for r in rows:
        c = by_op.get(r["op"])
        if c is None:
            continue

        def best(x: dict[str, Any]) -> str:
            vb = x.get("best_vs_best")
            figure = f"{vb:.3f}x" if isinstance(vb, int | float) else "n/a"
            return f"#{x.get('best_attempt')} {figure} {x.get('best_standing', '')}"[:34]

        held = ", ".join(
            f"#{k['attempt']} {'held' if k['held'] else 'not held'}" for k in r.get("confirmed", [])
        )
        a, b = r.get("best_vs_best"), c.get("best_vs_best")
        band = max(float(r.get("best_noise") or 0), float(c.get("best_noise") or 0), 0.01)
        same_words = r.get("best_shapes") == c.get("best_shapes")
        close = isinstance(a, int | float) and isinstance(b, int | float) and abs(a / b - 1) <= band
        verdict = (
            "yes"
            if same_words and close
            else f"words {'=' if same_words else '!='}, "
            f"vs best {'within' if close else 'beyond'} {band:.1%}"
        )
        lines.append(f"{r['op']:<12} {best(r):<34} {held[:22]:<22} {best(c):<34} {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument(
        "--again", nargs="*", default=[], choices=OPS,
        help="after the ops, these once more on the box the first runs warmed",
    )  # fmt: skip
    p.add_argument("--attempts", type=int, default=40)
    p.add_argument("--budget-s", type=float, default=540.0, help="for all ops together")
    p.add_argument("--out", default=None)
    p.add_argument("--from-runs", nargs="+", default=None, metavar="RUN_DIR")
    p.add_argument("--keep-reports", action="store_true", help="tar the .ncu-rep reports too")
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="make only this many GPUs visible (CUDA_VISIBLE_DEVICES=0..N-1); default all",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="after each op's default run, the same run with --profile off --no-confirm; "
        "their best standings compared (twice the time: pick fewer --ops)",
    )
    args = p.parse_args(argv)
    out = Path(args.out or os.environ.get("OUT") or "default-rate-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    controls: list[dict[str, Any]] = []
    if args.from_runs:
        rows = [measure(Path(d)) for d in args.from_runs]
    else:
        deadline = time.monotonic() + args.budget_s
        rows = []
        for k, op in enumerate(args.ops):
            left = deadline - time.monotonic()
            if left < MIN_START_S:
                print(f"{op}: not run ({left:.0f} s of the budget left)", file=sys.stderr)
                continue
            # the ops after this one keep at least MIN_START_S each (twice with --control)
            later = (len(args.ops) - k - 1) * MIN_START_S * (2 if args.control else 1)
            share = max(MIN_START_S, left - later - STOP_GRACE_S)
            rows.append(measure(run_op(op, args.attempts, out, share, gpus=args.gpus)))
            left = deadline - time.monotonic()
            if args.control and left >= MIN_START_S:
                controls.append(
                    measure(run_op(op, args.attempts, out, left, CONTROL_ARGS, gpus=args.gpus))
                )
            elif args.control:
                print(f"{op}: no control run ({left:.0f} s left)", file=sys.stderr)
        for op in args.again:  # the box is warm now: caches filled, rates on disk
            left = deadline - time.monotonic()
            if left < MIN_START_S:
                print(f"{op} again: not run ({left:.0f} s of the budget left)", file=sys.stderr)
                continue
            row = measure(run_op(op, args.attempts, out, left, gpus=args.gpus, suffix="-again"))
            rows.append({**row, "op": f"{row['op']} again"})
        with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:

            def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
                return None if info.name.endswith(".ncu-rep") and not args.keep_reports else info

            if (out / "runs").exists():
                tar.add(out / "runs", arcname="runs", filter=keep)
        subprocess.run(["rm", "-rf", str(out / "runs")], check=False)
        # the workers the last run kept warm go too: the box is left as it was found
        subprocess.run(
            [sys.executable, "-m", "kernelladder.verifier.host.keeper", "stop"],
            env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False, capture_output=True,
        )  # fmt: skip
    (out / "results.json").write_text(json.dumps({"runs": rows, "controls": controls}, indent=1))
    text = table(rows)
    costs = costs_table(rows)
    if costs:
        text += "\n\n" + costs
    if controls:
        text += "\n\n" + comparison(rows, controls)
    (out / "table.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
