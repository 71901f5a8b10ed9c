#!/usr/bin/env python3
"""The tune proposer against the physical limit of its own space, on one GPU.

For each mistuned workspace (examples/tune-matmul-fp16, tune-bias-gelu, tune-layernorm,
tune-softmax): an exhaustive sweep of the tuner's own space (the knobs and constraints
tune reads from the start, on this GPU): every feasible config compiled on every core and
screened on the GPU (bench/space_sweep.py), then the --top fastest verified and timed by
the verifier (pipelined workers, the GPU exclusive while timing), as a tune attempt is;
then a default `kernelladder optimize WS --proposer tune` run of 40 attempts. It reports
whether the tuner's best reaches >= 95 % of the sweep's best speed, and at which attempt;
for the matmul its standing against torch.compile (cuBLAS at fp16). Last,
examples/own-kernel tuned from its start (3.92x over its start was measured before).

    python3 bench/tune_sweep.py [--screen-s 420] [--top 16] [--tune-s 75] [--own-s 55]
                                [--budget-s 510] [--only NAME ...]

A screen stops at --screen-s seconds per workspace; the table says how many of the
feasible configs it timed (all of them, or a fair sample: seeds first, then a fixed
shuffle). Each tune run's time limit is --tune-s or its share of what is left of
--budget-s (counted from the end of the sweeps), so a run may end before 40 attempts
(the table says how many were judged). The whole bench is longer than one device call
for the matmul's space: run it with bench/detached.sh.

Tune runs use --profile off and --no-confirm (both cost GPU time the bench does not
have; without the profile the tuner's first moves are not steered by it); a tune run has
no stagnation stop by default (since 2ba2b7c; the runs of docs/results/ were given
--stagnation 40, the same within 40 attempts). Logs, sweep records and run directories
go under $OUT (a temporary directory when unset); the table is printed last. Needs a
CUDA GPU, torch and triton.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from space_sweep import hardware, plan, screen  # noqa: E402

from kernelladder.engine import find_knobs as find  # noqa: E402
from kernelladder.engine import with_config  # noqa: E402

WORKSPACES = ("tune-matmul-fp16", "tune-bias-gelu", "tune-layernorm", "tune-softmax")
OWN = "own-kernel"
REACH = 0.95
STARTUP_S = 20.0  # an optimize run's start to its first verdict on the H200 (FACTS.md)
CLI = "import sys; from kernelladder.cli import main; sys.exit(main())"


def _largest(verdict: dict[str, Any]) -> dict[str, Any]:
    timings = [t for t in verdict.get("timings") or () if isinstance(t, dict)]
    return timings[-1] if timings else {}


def _ms(verdict: dict[str, Any]) -> float | None:
    if verdict.get("verdict") != "pass" or verdict.get("early_stop"):
        return None  # a failure, or coarse times of a loser
    ms = _largest(verdict).get("candidate_ms")
    return float(ms) if isinstance(ms, int | float) and ms > 0 else None


def _sweeps(names: list[str], hardware: dict, args: Any, out: Path) -> dict[str, dict]:
    """Each workspace screened (the GPU to the screen alone), then the screens' fastest
    configs verified through one pool of workers."""
    screens = {}
    for name in names:
        ws = ROOT / "examples" / name
        if args.device == "cuda":
            screens[name] = screen(
                ws, hardware, out / f"{name}.screen.jsonl", compilers=args.compilers,
                cut=args.screen, seconds=args.screen_s,
            )  # fmt: skip
        else:  # no GPU: the seeds stand for the screen's ranking (a smoke run)
            space, configs = plan((ws / "kernel.py").read_text(), hardware)
            screens[name] = {"feasible": len(configs), "screened": 0, "best_ms": None,
                             "ranked": [space.as_dict(c) for c in space.seeds()]}  # fmt: skip
        shown = {k: v for k, v in screens[name].items() if k != "ranked"}
        print(f"{name} screen: {json.dumps(shown)}", flush=True)
    return asyncio.run(_confirm_all(names, screens, args, out))


async def _confirm_all(names: list[str], screens: dict, args: Any, out: Path) -> dict:
    from kernelladder.verifier.host.pool import LocalPool

    pool = LocalPool(args.device, size=1, per_gpu=args.workers)
    began = time.monotonic()
    await pool.start()
    print(f"{args.workers} verifier workers up in {time.monotonic() - began:.0f} s", flush=True)
    results = {}
    try:
        for name in names:
            ws = ROOT / "examples" / name
            top = screens[name]["ranked"][: args.top]
            confirmed = await _confirm(pool, ws, top, args, out / f"{name}.confirm.jsonl")
            shown = {k: v for k, v in screens[name].items() if k not in ("ranked", "best_ms")}
            results[name] = {**shown, "screen_best_ms": screens[name]["best_ms"], **confirmed}
            print(f"{name} sweep: {json.dumps(results[name])}", flush=True)
    finally:
        await pool.close()
    return results


async def _confirm(pool: Any, ws: Path, configs: list, args: Any, log: Path) -> dict[str, Any]:
    """The screen's fastest configs verified and timed by the verifier, as tune's are."""
    from kernelladder.ops.registry import op_to_wire
    from kernelladder.ops.workspace import WorkspaceSpec

    source = (ws / "kernel.py").read_text()
    knobs = find(source).knobs
    wire = op_to_wire(WorkspaceSpec.from_dir(ws, check=False))
    began = time.monotonic()
    queue = list(configs)
    results: list[dict[str, Any]] = []

    async def one_worker() -> None:
        while queue:
            config = queue.pop(0)
            request = {
                "op": wire, "source": with_config(source, knobs, config),
                "device": args.device, "min_speedup": 0.0, "baselines": False,
                "pipeline": True, "timeout_s": 90.0,
            }  # fmt: skip
            verdict = (await pool.verify(request)).to_dict()
            row = {"config": config, "verdict": verdict.get("verdict"),
                   "gate": verdict.get("gate"), "ms": _ms(verdict)}  # fmt: skip
            results.append(row)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")

    await asyncio.gather(*(one_worker() for _ in range(args.workers)))
    timed = [r for r in results if r["ms"] is not None]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    return {
        "confirmed": len(results), "passed": len(timed),
        "best_ms": best["ms"] if best else None,
        "best_config": best["config"] if best else None,
        "confirm_wall_s": time.monotonic() - began,
    }  # fmt: skip


def _tune(
    ws: Path, run_dir: Path, attempts: int, seconds: float, out: Path, device: str
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("ANTHROPIC_API_KEY", None)
    cmd = [
        sys.executable, "-c", CLI, "optimize", str(ws), "--proposer", "tune",
        "--max-attempts", str(attempts), "--time-limit", str(seconds), "--profile", "off",
        "--no-confirm", "--gate", "approve", "--json",
        "--run-dir", str(run_dir), "--device", device,
    ]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=seconds + 120
    )
    wall = time.monotonic() - began
    (out / f"{ws.name}.optimize.stdout").write_text(done.stdout)
    (out / f"{ws.name}.optimize.stderr").write_text(done.stderr)
    times: dict[int, float] = {}
    verdicts: dict[int, dict] = {}
    for path in sorted((run_dir / "attempts").glob("*.json"), key=lambda p: int(p.stem)):
        try:
            verdicts[int(path.stem)] = v = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (ms := _ms(v)) is not None:
            times[int(path.stem)] = ms
    best = min(times, key=lambda n: times[n]) if times else None
    moves = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines() if run_dir.exists() else ():
        e = json.loads(line)
        if e.get("kind") == "proposal_received":
            moves[e["attempt"]] = e.get("move", "")
    stop = ""
    try:
        stop = json.loads(done.stdout.strip().splitlines()[-1]).get("stop_reason", "")
    except (IndexError, ValueError, AttributeError):
        stop = f"exit {done.returncode}"
    baselines = _largest(verdicts.get(best, {})).get("baselines_ms") or {}
    return {
        "rc": done.returncode, "wall_s": wall, "judged": len(verdicts), "times": times,
        "best": best, "best_ms": times.get(best) if best is not None else None,
        "start_ms": times.get(0), "compile_ms": baselines.get("torch.compile"),
        "reference_ms": _largest(verdicts.get(best, {})).get("reference_ms"),
        "best_move": moves.get(best, ""), "stop": stop,
    }  # fmt: skip


def _limit(deadline: float, wanted: float, runs_left: int, own_s: float) -> float:
    """A tune run's time limit: as asked, or its share of what is left of the budget
    (each run also pays its start: workers, baselines, the start's verdict)."""
    left = deadline - time.monotonic() - own_s - STARTUP_S * (runs_left + 1)
    return max(20.0, min(wanted, left / runs_left))


def _over(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def _fmt(x: Any, spec: str = ".4f") -> str:
    return format(x, spec) if isinstance(x, int | float) else "n/a"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attempts", type=int, default=40)
    p.add_argument("--screen-s", type=float, default=420.0, help="seconds per screen at most")
    p.add_argument(
        "--screen",
        type=float,
        default=0.25,
        help="a probe this much slower than the fastest so far is not timed in full",
    )
    p.add_argument("--top", type=int, default=16, help="configs of each screen verified")
    p.add_argument("--compilers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--only", nargs="*", default=list(WORKSPACES), choices=WORKSPACES)
    p.add_argument("--tune-s", type=float, default=75.0, help="time limit of each tune run")
    p.add_argument("--own-s", type=float, default=55.0, help="time limit of the own-kernel run")
    p.add_argument(
        "--budget-s", type=float, default=510.0,
        help="the whole bench; later runs get shorter time limits to stay inside it",
    )  # fmt: skip
    p.add_argument("--workers", type=int, default=3, help="sweep workers sharing the GPU")
    p.add_argument("--device", default="cuda", help="cpu: a smoke run of the code paths")
    args = p.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="tune-sweep-"))
    out.mkdir(parents=True, exist_ok=True)
    gpu = hardware(args.device)
    print(f"{gpu['gpu']} (cc {gpu['cc']}); logs under {out}", flush=True)
    names = [n for n in WORKSPACES if n in args.only]
    sweeps = _sweeps(names, gpu, args, out)
    deadline = time.monotonic() + args.budget_s
    rows = []
    for i, name in enumerate(names):
        ws = ROOT / "examples" / name
        sweep = sweeps[name]
        limit = _limit(deadline, args.tune_s, len(names) - i, args.own_s)
        tune = _tune(ws, out / f"{name}.run", args.attempts, limit, out, args.device)
        print(f"{name} tune: {json.dumps({k: v for k, v in tune.items() if k != 'times'})}",
              flush=True)  # fmt: skip
        reached_at = None
        if sweep["best_ms"] is not None:
            goal = sweep["best_ms"] / REACH
            reached_at = next((n for n in sorted(tune["times"]) if tune["times"][n] <= goal), None)
        rows.append((name, sweep, tune, reached_at))
    limit = min(args.own_s, max(20.0, deadline - time.monotonic() - STARTUP_S))
    own = _tune(ROOT / "examples" / OWN, out / f"{OWN}.run", args.attempts, limit, out, args.device)
    print(f"{OWN} tune: {json.dumps({k: v for k, v in own.items() if k != 'times'})}", flush=True)

    print("\nworkspace          screened/feasible (verified)  sweep best ms  tune best ms (#, judged)"
          "  tune vs sweep  >=95%?  start ms  vs torch.compile  vs reference")  # fmt: skip
    for name, sweep, tune, reached_at in rows:
        swept = (
            f"{sweep['screened']}/{sweep['feasible']}"
            + ("" if sweep["screened"] >= sweep["feasible"] else "*")
            + f" ({sweep['passed']}/{sweep['confirmed']})"
        )
        ratio = (
            (sweep["best_ms"] / tune["best_ms"]) if sweep["best_ms"] and tune["best_ms"] else None
        )
        reached = f"yes #{reached_at}" if reached_at is not None else "no"
        vs = (
            (tune["compile_ms"] / tune["best_ms"])
            if tune["compile_ms"] and tune["best_ms"]
            else None
        )
        ref = _over(tune["reference_ms"], tune["best_ms"])
        print(f"{name:<18} {swept:>28}  {_fmt(sweep['best_ms']):>13}  "
              f"{_fmt(tune['best_ms']):>8} (#{tune['best']}, {tune['judged']})  "
              f"{_fmt(ratio, '.3f'):>13}  {reached:>6}  {_fmt(tune['start_ms']):>8}  "
              f"{_fmt(vs, '.3f') + 'x' if vs else 'n/a':>16}  "
              f"{_fmt(ref, '.3f') + 'x' if ref else 'n/a':>12}")  # fmt: skip
    gain = (own["start_ms"] / own["best_ms"]) if own["start_ms"] and own["best_ms"] else None
    print(f"{OWN:<18} start {_fmt(own['start_ms'])} ms -> best {_fmt(own['best_ms'])} ms "
          f"(#{own['best']}, {own['judged']} judged): {_fmt(gain, '.2f')}x over its start "
          f"(3.92x measured before); stop: {own['stop']}")  # fmt: skip
    print("* the screen stopped at --screen-s: a fair sample of the feasible configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
