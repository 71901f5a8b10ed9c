#!/usr/bin/env python3
"""Every feasible config of the tuner's space for one workspace, compiled on every core
and timed on the GPU: the physical limit of what tuning that kernel can find.

    python3 bench/space_sweep.py examples/tune-matmul-fp16 [--compilers 14]
                                 [--screen 0.25] [--screen-s 540]

The space is the tune proposer's own (knobs found by role, the constraints of the kernel
and this GPU: `kernelladder.engine.proposers.tune`). Two stages:

- **screen**: a pool of processes compiles each config (Triton in the verifier's
  compile-only mode: compiled and loaded, nothing launched, the GPU left alone) while
  this process times each compiled config at the workspace's largest shape with the
  verifier's timer (CUDA events, L2 flushed before each trial). A config gets two probe
  trials; only one within --screen of the fastest so far gets a full timing (at least 10
  trials). Two trials 25 % slower than a config already timed is a loser at any noise the
  verifier sees on these kernels (1-5 %). A config that fails to compile or to run is
  recorded with its error.
- **confirm** (`tune_sweep.py` does it, through the verifier's worker pool): the fastest
  configs of the screen verified as any tune attempt is (correctness, determinism,
  honesty, the speed gate); the sweep's best is the fastest of those verdicts.

The screen stops at --screen-s seconds; its result says how many of the feasible configs
it timed (seeds first, the rest in a fixed shuffled order, so a capped screen is a fair
sample). One JSON line per config goes to the log. Needs a CUDA GPU, torch and triton.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelladder.engine import TuneSpace as Space  # noqa: E402
from kernelladder.engine import find_knobs as find  # noqa: E402
from kernelladder.engine import with_config  # noqa: E402

SCREEN = 0.25  # a probe this much slower than the fastest so far is not timed in full
FULL_TARGET_MS = 25.0
PROBE_TRIALS = 2

_WORKER: dict[str, Any] = {}  # a compile process's workspace, entry and empty inputs


def plan(source: str, hardware: dict[str, Any]) -> tuple[Space, list[tuple[int, ...]]]:
    """(space, every feasible config): the seeds first, then the rest in a fixed
    shuffled order."""
    space = Space.of(find(source), hardware)
    allowed = space.estimates(space.start())
    feasible = [c for c in space.all() if not space.why_not(c, allowed)]
    chosen = set(feasible)
    seeds = [c for c in space.seeds() if c in chosen]
    rest = [c for c in feasible if c not in set(seeds)]
    random.Random(0).shuffle(rest)
    return space, seeds + rest


def _import(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _entry(ws_spec: Any, module: Any, device: str) -> Any:
    if ws_spec.entry == "kernel":
        return module.kernel
    return ws_spec.build_candidate(module.ModelNew, device)


def _layout(ws_spec: Any) -> list[Any]:
    """The largest shape's inputs drawn on the meta device: sizes, strides and dtypes."""
    import torch

    shape = ws_spec.largest_shape("cuda")
    inputs = ws_spec.make_inputs(shape, 0, "meta")
    return [
        (tuple(v.shape), tuple(v.stride()), v.dtype) if isinstance(v, torch.Tensor) else v
        for v in (inputs[n] for n in ws_spec.arg_names)
    ]


def _compile_init(ws_dir: str) -> None:
    import torch

    from kernelladder.ops.workspace import WorkspaceSpec
    from kernelladder.verifier.worker import fence

    os.nice(5)  # the timing process's launches come first
    fence.install_launch_counter()
    ws_spec = WorkspaceSpec.from_dir(ws_dir, check=False)
    args = [
        torch.empty_strided(v[0], v[1], dtype=v[2], device="cuda") if isinstance(v, tuple) else v
        for v in _layout(ws_spec)
    ]  # allocated, never filled: no kernel of ours touches the GPU
    _WORKER.update(spec=ws_spec, args=args)


def _compile_one(job: tuple[int, str]) -> tuple[int, str, float]:
    """(index, error or "", seconds): the config's kernels compiled and loaded, none
    launched. A wrapper that needs real work (a value, torch compute) is compiled later
    by the timing process's first call."""
    from kernelladder.verifier.worker import fence
    from kernelladder.verifier.worker.compile_ahead import NoGpuWork, _CompileStopped

    index, path = job
    began = time.perf_counter()
    try:
        fn = _entry(_WORKER["spec"], _import(path, f"kl_sweep_{index}"), "cuda")
        with fence.compile_only(), NoGpuWork():
            fn(*_WORKER["args"])
    except _CompileStopped:
        pass
    except BaseException as exc:  # judged: a config that does not compile is not timed
        return index, _error(exc), time.perf_counter() - began
    return index, "", time.perf_counter() - began


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:240]


def screen(
    ws: Path, hardware: dict[str, Any], log: Path, *, compilers: int, cut: float, seconds: float
) -> dict[str, Any]:
    """Every feasible config compiled by `compilers` processes and timed here, in the
    order they finish compiling. Returns the counts, the time and the configs by time."""
    import torch

    from kernelladder.ops.workspace import WorkspaceSpec
    from kernelladder.verifier.worker.timing import GpuTimer

    source = (ws / "kernel.py").read_text()
    space, configs = plan(source, hardware)
    knobs = find(source).knobs
    began = time.monotonic()
    src_dir = Path(tempfile.mkdtemp(prefix=f"sweep-{ws.name}-"))
    jobs = []
    for i, config in enumerate(configs):
        path = src_dir / f"config_{i}.py"
        path.write_text(with_config(source, knobs, space.as_dict(config)))
        jobs.append((i, str(path)))

    ws_spec = WorkspaceSpec.from_dir(ws, check=False)
    shape = ws_spec.largest_shape("cuda")
    inputs = ws_spec.make_inputs(shape, 0, "cuda")
    args = [inputs[n] for n in ws_spec.arg_names]
    timer = GpuTimer("cuda")
    rows: list[dict[str, Any]] = []
    best = math.inf
    compile_s: list[float] = []
    context = multiprocessing.get_context("spawn")
    with log.open("w") as out, context.Pool(compilers, _compile_init, (str(ws),)) as pool:
        for index, error, took in pool.imap_unordered(_compile_one, jobs, chunksize=1):
            compile_s.append(took)
            row: dict[str, Any] = {"config": space.as_dict(configs[index]), "compile_s": took}
            if not error:
                try:
                    fn = _entry(ws_spec, _import(jobs[index][1], f"kl_sweep_{index}"), "cuda")
                    call = lambda fn=fn: fn(*args)  # noqa: E731
                    probe = statistics.median(timer.trials(call, PROBE_TRIALS))
                    row["probe_ms"] = probe
                    if probe <= best * (1.0 + cut):
                        row["ms"] = timer.time(call, FULL_TARGET_MS).median_ms
                        best = min(best, row["ms"])
                except Exception as exc:  # a launch that fails: recorded, not timed
                    error = _error(exc)
                    torch.cuda.synchronize()
            if error:
                row["error"] = error
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            if len(rows) % 250 == 0:
                print(f"  {ws.name}: {len(rows)} of {len(jobs)} screened in "
                      f"{time.monotonic() - began:.0f} s, best {best:.4f} ms", flush=True)  # fmt: skip
            if time.monotonic() - began > seconds:
                pool.terminate()
                break
    timed = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
    return {
        "size": space.size, "feasible": len(configs), "screened": len(rows),
        "failed": sum(1 for r in rows if "error" in r), "timed_in_full": len(timed),
        "wall_s": time.monotonic() - began,
        "compile_s_median": statistics.median(compile_s) if compile_s else None,
        "best_ms": timed[0]["ms"] if timed else None,
        "ranked": [r["config"] for r in timed],
    }  # fmt: skip


def hardware(device: str = "cuda") -> dict[str, Any]:
    """The GPU's name and compute capability (the space's constraints read them)."""
    import torch

    if device != "cuda":
        return {"gpu": "none (a smoke run: nothing is timed)", "cc": ""}
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "cc": f"{props.major}.{props.minor}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workspace", type=Path)
    p.add_argument("--compilers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--screen", type=float, default=SCREEN)
    p.add_argument("--screen-s", type=float, default=540.0)
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("space_sweep: needs a CUDA GPU (the screen times every config on it)")
        return 2
    if not (args.workspace / "kernel.py").is_file():
        print(f"space_sweep: {args.workspace} is not a workspace (no kernel.py)")
        return 2
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="space-sweep-"))
    out.mkdir(parents=True, exist_ok=True)
    result = screen(
        args.workspace, hardware(), out / f"{args.workspace.name}.screen.jsonl",
        compilers=args.compilers, cut=args.screen, seconds=args.screen_s,
    )  # fmt: skip
    ranked = result.pop("ranked")
    print(json.dumps(result))
    for config in ranked[:10]:
        print(json.dumps(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
