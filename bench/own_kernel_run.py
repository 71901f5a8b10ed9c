#!/usr/bin/env python3
"""The user's own kernel on the GPU: `kernelladder optimize examples/own-kernel` with the
tune proposer and Nsight Compute profiles, then the start (attempt #0) against the final
best: the verifier's times per shape, against its own start, against torch.compile of the
same math written in torch (F.gelu(x + bias), timed here with triton.testing.do_bench
beside both kernels), and their profile summaries.

    python3 bench/own_kernel_run.py [--max-attempts 30] [--time-limit 240]

Logs and the run directory go under $OUT (a temporary directory when unset). The
headless optimize runs with textual, asyncssh and anthropic blocked from import, so a
run that needs them fails here and says which.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "own-kernel"
BLOCKED = ("textual", "asyncssh", "anthropic")

# runs kernelladder's CLI with the app-only packages made unimportable
BLOCKING_MAIN = f"""
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("headless optimize imported " + name)
        return None
sys.meta_path.insert(0, _Blocker())
from kernelladder.cli import main
sys.exit(main())
"""


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _verdict(run_dir: Path, n: int) -> dict:
    try:
        return json.loads((run_dir / "attempts" / f"{n}.json").read_text())
    except (OSError, ValueError):
        return {}


def _largest_ms(verdict: dict) -> tuple[str, float | None, dict]:
    timings = [t for t in verdict.get("timings") or () if isinstance(t, dict)]
    if not timings:
        return "", None, {}
    t = timings[-1]  # the suite is ordered small to large
    return str(t.get("label")), t.get("candidate_ms"), dict(t.get("baselines_ms") or {})


def _do_bench_rows(run_dir: Path, start: int, best: int) -> dict[str, float | str]:
    """do_bench (ms) of the start, the best and torch.compile(F.gelu(x + bias)) on the
    largest shape, side by side in this process."""
    import torch
    import torch.nn.functional as F
    import triton.testing

    from kernelladder.ops.workspace import WorkspaceSpec

    spec = WorkspaceSpec.from_dir(EXAMPLE, check=False)
    shape = spec.largest_shape("cuda")
    inputs = spec.make_inputs(shape, 0, "cuda")
    x, bias = inputs["x"], inputs["bias"]
    out: dict[str, float | str] = {"shape": shape.label}
    compiled = torch.compile(lambda a, b: F.gelu(a + b), dynamic=False)
    ref = F.gelu(x.float() + bias.float()).to(x.dtype)
    compiled(x, bias)
    out["torch.compile(F.gelu(x + bias))"] = triton.testing.do_bench(lambda: compiled(x, bias))
    for label, n in (("start", start), ("best", best)):
        import importlib.util

        path = run_dir / "attempts" / f"{n}.py"
        module_spec = importlib.util.spec_from_file_location(f"own_kernel_{label}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        got = module.kernel(x, bias)
        err = (got.float() - ref.float()).abs().max().item()
        out[f"{label} max |err| vs F.gelu"] = err
        out[label] = triton.testing.do_bench(lambda m=module: m.kernel(x, bias))
    return out


def _fmt(v: object, spec: str = ".4f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else str(v if v is not None else "n/a")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-attempts", type=int, default=30)
    p.add_argument("--time-limit", type=float, default=240.0)
    args = p.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="own-kernel-"))
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "own"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("ANTHROPIC_API_KEY", None)  # the workspace's default proposer is then tune
    cmd = [
        sys.executable, "-c", BLOCKING_MAIN, "optimize", str(EXAMPLE),
        "--max-attempts", str(args.max_attempts), "--time-limit", str(args.time_limit),
        "--profile", "auto", "--gate", "approve", "--json", "--run-dir", str(run_dir),
    ]  # fmt: skip
    print("$", " ".join(cmd[:2]), "<blocking main>", " ".join(cmd[3:]), flush=True)
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=330)
    wall = time.monotonic() - began
    (out / "optimize.stdout").write_text(done.stdout)
    (out / "optimize.stderr").write_text(done.stderr)
    print(done.stderr[-4000:])
    if done.returncode != 0:
        print(f"optimize exited {done.returncode} after {wall:.0f} s (logs in {out})")
        return 1
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    events = _events(run_dir)
    profiles = {e["attempt"]: e for e in events if e["kind"] == "profile_ready"}
    best = (summary.get("best") or {}).get("attempt")
    start = 0
    if best is None:
        print("no passing attempt: nothing to compare")
        return 1
    rows = []
    start_label, start_ms, start_base = _largest_ms(_verdict(run_dir, start))
    _, best_ms, _ = _largest_ms(_verdict(run_dir, best))
    compile_ms = start_base.get("torch.compile")
    try:
        side = _do_bench_rows(run_dir, start, best)
    except Exception as exc:  # the table still shows the verifier's figures
        side = {"error": f"{type(exc).__name__}: {exc}"}
    rows.append(("attempt", f"#{start} (your kernel)", f"#{best}"))
    rows.append(("move", "start", (summary.get("best") or {}).get("move", "")))
    rows.append((f"verifier ms at {start_label}", _fmt(start_ms), _fmt(best_ms)))
    if start_ms and best_ms:
        rows.append(("vs its own start", "1.00x", f"{start_ms / best_ms:.2f}x"))
    if isinstance(compile_ms, (int, float)) and start_ms and best_ms:
        rows.append(("vs torch.compile(original)", f"{compile_ms / start_ms:.2f}x", f"{compile_ms / best_ms:.2f}x"))  # fmt: skip
    gelu_ms = side.get("torch.compile(F.gelu(x + bias))")
    if isinstance(gelu_ms, (int, float)):
        rows.append(("do_bench ms", _fmt(side.get("start")), _fmt(side.get("best"))))
        rows.append(("vs torch.compile(F.gelu(x+b))",
                     f"{gelu_ms / side['start']:.2f}x", f"{gelu_ms / side['best']:.2f}x"))  # fmt: skip
        rows.append(("torch.compile(F.gelu(x+b)) ms", _fmt(gelu_ms), ""))
        rows.append(("max |err| vs F.gelu", _fmt(side.get("start max |err| vs F.gelu"), ".3g"),
                     _fmt(side.get("best max |err| vs F.gelu"), ".3g")))  # fmt: skip
    elif "error" in side:
        rows.append(("do_bench", side["error"][:60], ""))
    for key, label in (
        ("duration_us", "ncu duration us"),
        ("dram_pct", "DRAM % of peak"),
        ("sm_pct", "SM % of peak"),
        ("achieved_occupancy_pct", "achieved occupancy %"),
        ("registers_per_thread", "registers/thread"),
        ("shared_mem_per_block_bytes", "shared mem/block B"),
        ("l2_hit_pct", "L2 hit %"),
    ):
        vals = []
        for n in (start, best):
            p_ = profiles.get(n) or {}
            vals.append(_fmt((p_.get("summary") or {}).get(key), ".1f") if p_.get("status") == "ok" else f"({p_.get('reason', 'no profile')})"[:40])  # fmt: skip
        rows.append((label, *vals))
    for n in (start, best):
        s = (profiles.get(n) or {}).get("summary") or {}
        stalls = ", ".join(f"{r} {v:.1f}" for r, v in s.get("stalls") or [])
        print(f"#{n} stalls: {stalls or 'n/a'}; ncu: {s.get('recommendation', 'n/a')[:160]}")
    print(f"profiles recorded for attempts {sorted(profiles)}; attempts "
          f"{summary['attempts']['judged']} judged, {summary['attempts']['passed']} passed; "
          f"stop: {summary.get('stop_reason')}; wall {wall:.0f} s; run dir {run_dir}")  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"\n{'':<{width}}  {'start':>22}  {'final best':>22}")
    for name, a, b in rows:
        print(f"{name:<{width}}  {a:>22}  {b:>22}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
