"""`kernelladder check OP|PROBLEM.py CANDIDATE.py`: verify one candidate in a fresh worker.

Exit 0 on pass, 1 on fail, 2 on bad usage (one line, no traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.verifier.contract.verdict import Verdict

DEFAULT_TIMEOUT_S = 300.0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "check",
        help="verify one candidate kernel",
        description="Verify one candidate: load, fence, correctness, anti-cheat, "
        "determinism and speed gates, in an isolated worker process.",
    )
    p.add_argument(
        "op", metavar="OP|PROBLEM.py", help="built-in op name or KernelBench problem file"
    )
    p.add_argument("candidate", metavar="CANDIDATE.py", help="the candidate's source file")
    p.add_argument(
        "--min-speedup", type=float, default=1.0, metavar="X", help="speed gate (default 1.0)"
    )
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda if available"
    )
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S", help="wall-clock limit"
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--no-baselines", action="store_true", help="skip library/torch.compile baselines"
    )

    p.add_argument(
        "--unseen-seed",
        type=int,
        default=None,
        metavar="N",
        help="draw the unseen shapes a verdict names (its correctness evidence's "
        "unseen_seed) again, to reproduce it",
    )
    from kernelladder.cli.common import add_runner_arguments  # --remote and the SSH settings

    add_runner_arguments(p)
    p.set_defaults(func=run)


def _read_text(path: str, what: str) -> str:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} not found: {path}")
    if not p.is_file():
        raise UsageError(f"{what} is not a file: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _resolve_op(name_or_path: str) -> Any:
    """The op's wire form; UsageError for an unknown op or unreadable problem file."""
    from kernelladder.ops import registry

    if name_or_path in registry.BUILTIN:  # its name is its wire form (no spec, no torch here)
        return name_or_path
    looks_like_file = name_or_path.endswith(".py") or "/" in name_or_path
    if looks_like_file and not Path(name_or_path).is_dir():  # a directory: a workspace
        _read_text(name_or_path, "problem file")
    try:
        spec = registry.load_op(name_or_path)
    except registry.OpLoadError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # a problem file that does not execute
        raise UsageError(
            f"cannot load problem {name_or_path}: {type(exc).__name__}: {exc}"
        ) from None
    return registry.op_to_wire(spec)


def _progress_printer(enabled: bool) -> Any:
    if not enabled:
        return None

    def show(gate: str, message: str) -> None:
        sys.stderr.write(f"\r\033[K  {gate}: {message[:100]}")
        sys.stderr.flush()

    return show


def _verify(args: argparse.Namespace, op_wire: Any, source: str) -> Verdict:
    """The one place a verdict is obtained (a remote runner can replace this function)."""
    from kernelladder.cli.common import remote_requested, verify_remote
    from kernelladder.verifier.host.client import verify_sync

    request = {
        "op": op_wire,
        "source": source,
        "device": args.device,
        "min_speedup": args.min_speedup,
        "baselines": not args.no_baselines,
    }
    if args.unseen_seed is not None:
        request["unseen_seed"] = args.unseen_seed
    show = _progress_printer(not args.json and sys.stderr.isatty())
    try:
        if remote_requested(args):
            return verify_remote(args, request, on_progress=show)
        return verify_sync(request, device=args.device, timeout_s=args.timeout, on_progress=show)
    finally:
        if show is not None:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """The --json object: the Verdict plus `times` (per shape) and the standing (vs best,
    per shape against the fastest baseline, the geomean's noise) at the top level."""
    from kernelladder.engine import merit_from_timings, standing_shapes

    d = verdict.to_dict()
    merit = merit_from_timings(
        verdict.timings,
        speedup=verdict.speedup,
        floor_fraction=verdict.floor_fraction,
        noise=verdict.noise,
    )
    if merit.vs_best is not None:
        d["vs_best"] = merit.vs_best
        d["standing_shapes"] = standing_shapes(verdict.timings)
        d["noise_of_geomean"] = merit.noise
        d["speedup_over"] = "reference"
    d["times"] = [
        {
            "shape": t["label"],
            "reference_ms": t["reference_ms"],
            "candidate_ms": t["candidate_ms"],
            "speedup": t["speedup"],
            "noise": t["noise"],
            "floor_ms": t["floor_ms"],
            "floor_fraction": t["floor_fraction"],
            "baselines_ms": t["baselines_ms"],
        }
        for t in d["timings"]
    ]
    return d


def run(args: argparse.Namespace) -> int:
    if args.min_speedup is None or not math.isfinite(args.min_speedup) or args.min_speedup < 0:
        raise UsageError("--min-speedup must be a number >= 0")
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    op_wire = _resolve_op(args.op)
    source = _read_text(args.candidate, "candidate file")
    from kernelladder.cli.common import (
        json_safe,
        load_remote,
        remote_requested,
        require_local_gpu,
    )
    from kernelladder.engine import RunOptions, default_device

    remote = remote_requested(args)
    if remote:
        load_remote(args)  # a bad remote setting: one line, exit 2, before any work
    else:
        require_local_gpu(args.device)
    # the device a run would verify on (remote: the box's GPU unless --device cpu)
    args.device = default_device(RunOptions(op=args.op, device=args.device, remote=remote))

    from kernelladder.verifier.host.client import WorkerUnavailable

    try:
        verdict = _verify(args, op_wire, source)
    except WorkerUnavailable as exc:
        print(f"kernelladder: error: the verifier worker did not start: {exc}", file=sys.stderr)
        return 1
    code = 0 if verdict.passed else 1
    try:
        if args.json:
            print(json.dumps(json_safe(verdict_json(verdict))), flush=True)
        else:
            from kernelladder.app.verdict_report import render

            render(verdict)
    except BrokenPipeError:  # `... | head`: the reader left; the exit code still tells
        sys.stderr.close()
    return code
