"""The Ray runner against the local runner on the same GPU(s): attempts per minute.

Run on the GPU box from the repository root:

    python3 bench/ray_vs_local.py [--op rmsnorm] [--attempts 20] [--wheels DIR ...]

The same short search (the search proposer is deterministic: same op, same branches,
same attempts, so the same candidates) runs twice, back to back in this one call:
  1. `kernelladder optimize OP --device cuda` (the local runner: one worker per GPU);
  2. the same with `--runner ray --ray-address local` (a Ray cluster started in the run's
     own process; one actor per GPU, each owning the same persistent worker).
Each run gets its own fresh Triton and inductor caches, so neither reuses the other's
compiled kernels. Attempts per minute are taken from each run's events.jsonl: judged
attempts over the span from the first AttemptStarted to the last VerdictReady (the
steady rate), and over the whole wall time of the command (start-up included).

ray is not on the GPU box: --wheels names directories holding its wheels (and its
dependencies). A wheel too large to carry in one piece may lie there split as
NAME.whl.part-aa, NAME.whl.part-ab, ...: the parts are joined before installing.
Prints a table last; writes results.json and every log under $OUT (or a temp dir).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def join_parts(dirs: list[str], joined: Path) -> Path:
    """Wheels carried in pieces (NAME.whl.part-00, -01, ... in any of `dirs`) joined in
    `joined`, the pieces in the order of their suffix."""
    joined.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[Path]] = {}
    for d in dirs:
        for p in Path(d).glob("*.whl.part-*"):
            parts.setdefault(p.name.split(".part-")[0], []).append(p)
    for name, pieces in parts.items():
        with open(joined / name, "wb") as whole:
            for piece in sorted(pieces, key=lambda p: p.name):
                whole.write(piece.read_bytes())
    return joined


def install_ray(dirs: list[str], out: Path) -> str:
    """pip install ray from local wheel directories (no index); '' when it worked."""
    if importlib.util.find_spec("ray") is not None:
        return ""
    if not dirs:
        return "ray is not installed and no --wheels DIR was given"
    joined = join_parts(dirs, out / "joined-wheels")
    links = [str(joined), *dirs]
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index"]
    for link in links:
        cmd += ["--find-links", link]
    result = subprocess.run([*cmd, "ray"], capture_output=True, text=True)
    (out / "pip-install.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        return "pip install ray failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
    importlib.invalidate_caches()
    return ""


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def one_run(label: str, extra: list[str], args: argparse.Namespace, out: Path) -> dict:
    run_dir = out / f"run-{label}"
    caches = out / f"caches-{label}"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env["TRITON_CACHE_DIR"] = str(caches / "triton")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cmd = [
        sys.executable, "-m", "kernelladder", "optimize", args.op,
        "--device", args.device, "--max-attempts", str(args.attempts),
        "--branches", str(args.branches), "--stagnation", "1000", "--gate", "approve",
        "--run-dir", str(run_dir), "--json", "--profile", "off", "--no-confirm", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    try:
        result = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=args.timeout, cwd=REPO
        )
        rc, stdout, stderr = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), str(exc.stderr or "")
    wall = time.monotonic() - started
    (out / f"{label}.stdout").write_text(stdout)
    (out / f"{label}.stderr").write_text(stderr)
    evs = events(run_dir)
    starts = [e["ts"] for e in evs if e["kind"] == "attempt_started"]
    verdicts = [e for e in evs if e["kind"] == "verdict_ready"]
    span = (max(e["ts"] for e in verdicts) - min(starts)) if verdicts and starts else 0.0
    judged = len(verdicts)
    slots = sorted({e.get("slot", "") for e in evs if e["kind"] == "attempt_started"})
    notices = [e["message"] for e in evs if e["kind"] == "notice"]
    return {
        "label": label,
        "rc": rc,
        "judged": judged,
        "passed": sum(1 for e in verdicts if e["verdict"] == "pass"),
        "retried": sum(1 for e in evs if e["kind"] == "attempt_retried"),
        "span_s": round(span, 2),
        "wall_s": round(wall, 2),
        "per_min_span": round(judged / span * 60, 2) if span > 0 else None,
        "per_min_wall": round(judged / wall * 60, 2) if wall > 0 else None,
        "slots": slots,
        "runner": next((e["runner"] for e in evs if e["kind"] == "run_started"), None),
        "finish": next((e["reason"] for e in evs if e["kind"] == "run_finished"), None),
        "notices": notices[:5],
        "stderr_tail": stderr.strip().splitlines()[-3:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rmsnorm")
    parser.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run of the script"
    )
    parser.add_argument("--attempts", type=int, default=20)
    parser.add_argument("--branches", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=160.0, help="per run, seconds")
    parser.add_argument("--wheels", nargs="*", default=[], metavar="DIR")
    parser.add_argument("--out", default=os.environ.get("OUT") or None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="ray-vs-local-"))
    out.mkdir(parents=True, exist_ok=True)

    problem = install_ray(args.wheels, out)
    if problem:
        print(f"ray_vs_local: {problem}; only the local run is measured", flush=True)
    runs = [one_run("local", [], args, out)]
    if not problem:
        ray_args = ["--runner", "ray", "--ray-address", "local"]
        if args.device == "cpu":  # one CPU actor, as the local runner has one CPU worker
            ray_args += ["--ray-slots", "1"]
        runs.append(one_run("ray", ray_args, args, out))
    result = {"op": args.op, "attempts": args.attempts, "branches": args.branches, "runs": runs}
    if len(runs) == 2 and runs[0]["per_min_span"] and runs[1]["per_min_span"]:
        result["ratio_span"] = round(runs[1]["per_min_span"] / runs[0]["per_min_span"], 3)
        result["ratio_wall"] = round(runs[1]["per_min_wall"] / runs[0]["per_min_wall"], 3)
    (out / "results.json").write_text(json.dumps(result, indent=1))

    for r in runs:
        if r["rc"] != 0 or r["notices"]:
            print(f"{r['label']}: rc {r['rc']}; notices {r['notices']}; stderr {r['stderr_tail']}")
    print(f"\n{args.op}, {args.attempts} attempts, {args.branches} branches; logs in {out}")
    head = f"{'runner':<8} {'judged':>6} {'passed':>6} {'retried':>7} {'span s':>7} {'wall s':>7} {'att/min span':>12} {'att/min wall':>12}  slots"
    print(head)
    print("-" * len(head))
    for r in runs:
        print(
            f"{r['label']:<8} {r['judged']:>6} {r['passed']:>6} {r['retried']:>7} "
            f"{r['span_s']:>7.1f} {r['wall_s']:>7.1f} {r['per_min_span'] or 0:>12.2f} "
            f"{r['per_min_wall'] or 0:>12.2f}  {','.join(r['slots'])} ({r['runner']})"
        )
    if "ratio_span" in result:
        print(
            f"ray/local attempts per minute: {result['ratio_span']:.3f} over the attempts' span, "
            f"{result['ratio_wall']:.3f} over the wall time"
        )
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
