"""The deployment table: each run's best kernel inside the Llama-3-8B-shaped model, checked
against the model without it and timed on a GPU (kernelladder deploy, docs/DEPLOY.md).

    python3 bench/deploy_table.py RUN_DIR [RUN_DIR ...]
    OUT=/tmp/out python3 bench/deploy_table.py runs/rmsnorm-x runs/attention-y

For every run given (an rmsnorm and an attention run, typically), one `kernelladder deploy
RUN_DIR --json` in its own process: the run's best that held, model llama-3-8b with 4
layers, batch 8, a 2048-token prompt, 128 new tokens, bf16, 7 back-to-back rounds of
unpatched eager, unpatched torch.compile, patched eager and patched torch.compile.
Prints each deploy's result, then one table (prefill and decode per variant, the patched
runs against the unpatched ones) with the GPU, the versions and the date; writes every
result to $OUT/deploy_table.json when OUT is set. Nothing is recorded into the runs
unless --record is given. Needs a GPU, torch, triton and transformers 5 or newer (the
deploy extra; a box that cannot reach a registry: `python3 -m pip show transformers`
there, and carry newer wheels with those of its requirements the box lacks); without a
GPU the deploys check on a tiny config and say speed is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelladder.deploy.result import result_lines, speed_table  # noqa: E402

TABLE = {
    "model": "llama-3-8b",
    "layers": 4,
    "batch": 8,
    "prompt": 2048,
    "new_tokens": 128,
    "dtype": "bfloat16",
    "rounds": 7,
}
ENTRY = "import sys; from kernelladder.cli import main; sys.exit(main(sys.argv[1:]))"


def deploy(run_dir: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable, "-c", ENTRY, "deploy", run_dir, "--json", "--progress",
        "--model", args.model, "--layers", str(args.layers), "--batch", str(args.batch),
        "--prompt", str(args.prompt), "--new-tokens", str(args.new_tokens),
        "--dtype", args.dtype, "--rounds", str(args.rounds),
    ]  # fmt: skip
    if not args.record:
        command.append("--no-record")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    sys.stderr.write(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode not in (0, 1) or not lines:
        error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"run_dir": run_dir, "status": "error", "error": error, "exit": proc.returncode}
    result = json.loads(lines[-1])
    result["bench_wall_s"] = round(time.time() - started, 1)
    return result


def table(results: list[dict]) -> list[str]:
    out = []
    first = next((r for r in results if r.get("versions")), None)
    if first is not None:
        v = first["versions"]
        m = first.get("model") or {}
        w = first.get("workload") or {}
        out.append(
            f"{m.get('name')}-shaped{' (tiny)' if m.get('tiny') else ''}, {m.get('layers')} layers, batch {w.get('batch')}, prompt "
            f"{w.get('prompt')}, {w.get('new_tokens')} new tokens, {m.get('dtype')}; "
            f"{first.get('gpu') or first.get('device')}; torch {v.get('torch')}, triton "
            f"{v.get('triton')}, transformers {v.get('transformers')}, CUDA {v.get('cuda')}; "
            f"{first.get('date')}"
        )
    for r in results:
        head = f"{r.get('op', '?')} {r.get('kernel', '')} ({r.get('run_dir')}): {r.get('status')}"
        out.append("")
        out.append(head)
        speed = r.get("speed")
        if speed:
            out += [f"  {line}" for line in speed_table(speed.get("rows") or [])]
            for c in speed.get("comparisons") or []:
                out.append(
                    f"  {c['patched']} vs unpatched, {c['phase']}: {c['speedup']:.3f}x "
                    f"{c['standing']} ({c['won']}/{c['rounds']} rounds won)"
                )
        else:
            out.append(f"  {r.get('speed_note') or r.get('error') or 'speed not measured'}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    for key, value in TABLE.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per deploy")
    parser.add_argument("--record", action="store_true", help="record each result in its run")
    args = parser.parse_args(argv)
    results = []
    for run_dir in args.runs:
        print(f"== {run_dir}", flush=True)
        result = deploy(run_dir, args)
        results.append(result)
        if result.get("status") == "error" and "versions" not in result:
            print(f"error: {result['error']}", flush=True)
        else:
            print("\n".join(result_lines(result)), flush=True)
    print()
    print("\n".join(table(results)))
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "deploy_table.json"
        path.write_text(json.dumps({"table": TABLE | vars(args), "results": results}, indent=1))
        print(f"\nwrote {path}")
    return 0 if all(r.get("status") == "match" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
