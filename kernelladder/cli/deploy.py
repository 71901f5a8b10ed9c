"""`kernelladder deploy RUN_DIR`: the run's kernel inside a real model, checked against the
model without it and, on a GPU, timed end to end (docs/DEPLOY.md).

Exit 0 when the patched model matches, 1 when it does not (or the kernel has no place
in the model, or did not load), 2 on bad input (one line). The result is recorded in
RUN_DIR as an event, so `replay` and the app show it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import json_safe


def add_parser(subparsers: Any) -> None:
    from kernelladder.deploy.models import DEFAULT_MODEL, model_names

    p = subparsers.add_parser(
        "deploy",
        help="put a found kernel into a real model: check it, time it",
        description="Put a run's kernel (its best that held, or --attempt N; or --kernel FILE "
        "--op OP) where a decoder model uses that op, built from a shipped config with random "
        "weights; check the patched model against the unpatched one (logits, greedy tokens, "
        "every kernel call) and, on a GPU, time prefill and decode eager and under "
        "torch.compile. Needs the deploy extra: pip install -e '.[deploy]'.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", help="the run whose kernel to deploy")
    p.add_argument("--attempt", type=int, default=None, metavar="N",
                   help="the run's attempt N (default: the run's best that held)")  # fmt: skip
    p.add_argument("--kernel", default=None, metavar="FILE",
                   help="a kernel file instead of a run (with --op)")  # fmt: skip
    p.add_argument("--op", default=None, metavar="OP",
                   help="--kernel's op: a built-in op or a workspace directory")  # fmt: skip
    p.add_argument(
        "--model",
        default=None,
        metavar="NAME|CONFIG.json",
        help=f"a shipped config ({', '.join(model_names())}; default {DEFAULT_MODEL}) or a "
        "Hugging Face config.json (no weights are loaded)",
    )
    p.add_argument("--layers", type=int, default=None, metavar="N",
                   help="decoder layers (GPU default 4; the tiny config has 2)")  # fmt: skip
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="sequences (GPU default 8, CPU 2)")  # fmt: skip
    p.add_argument("--prompt", type=int, default=None, metavar="S",
                   help="prompt tokens (GPU default 2048, CPU 16)")  # fmt: skip
    p.add_argument("--new-tokens", type=int, default=None, metavar="N",
                   help="generated tokens (GPU default 128, CPU 8)")  # fmt: skip
    p.add_argument("--dtype", default="bfloat16",
                   choices=("bfloat16", "float16", "float32", "bf16", "fp16", "fp32"),
                   help="the model's dtype (default bfloat16)")  # fmt: skip
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda if available (the CPU runs Triton's interpreter)")  # fmt: skip
    size = p.add_mutually_exclusive_group()
    size.add_argument("--tiny", dest="tiny", action="store_const", const=True, default=None,
                      help="the model's tiny config (the CPU's default)")  # fmt: skip
    size.add_argument("--full", dest="tiny", action="store_const", const=False,
                      help="the model's full sizes (the GPU's default)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=None, metavar="R",
                   help="back-to-back timing rounds on a GPU (default 7)")  # fmt: skip
    p.add_argument("--no-time", action="store_true", help="check only, also on a GPU")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt (default 0)")
    p.add_argument("--keep-model-eps", action="store_true",
                   help="rmsnorm: keep the model's RMSNorm eps (the kernel has the op's 1e-6)")  # fmt: skip
    p.add_argument("--no-record", action="store_true",
                   help="do not record the result in RUN_DIR")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--progress", action="store_true",
                   help="one 'progress: ...' line per step on stderr (for a program reading it)")  # fmt: skip
    p.set_defaults(func=run)


def _kernel(args: argparse.Namespace) -> Any:
    from kernelladder.deploy import kernel_source

    if args.kernel or args.op:
        if args.run_dir:
            raise UsageError("give RUN_DIR or --kernel FILE --op OP, not both")
        if not (args.kernel and args.op):
            raise UsageError("--kernel FILE needs --op OP (and --op needs --kernel)")
        if args.attempt is not None:
            raise UsageError("--attempt goes with RUN_DIR")
        return kernel_source.from_file(args.kernel, args.op)
    if not args.run_dir:
        raise UsageError("give RUN_DIR (a run's directory) or --kernel FILE --op OP")
    return kernel_source.from_run(args.run_dir, args.attempt)


def run(args: argparse.Namespace) -> int:
    from kernelladder.deploy.deployment import DeployRequest, run_deploy
    from kernelladder.deploy.models import DeployError
    from kernelladder.deploy.result import exit_code, result_lines

    request = DeployRequest(
        model=args.model, layers=args.layers, batch=args.batch, prompt=args.prompt,
        new_tokens=args.new_tokens, dtype=args.dtype, device=args.device, tiny=args.tiny,
        rounds=args.rounds, seed=args.seed, keep_model_eps=args.keep_model_eps,
        time_it=not args.no_time,
    )  # fmt: skip
    if args.progress:
        progress = _progress_lines
    else:
        progress = None if args.json or not sys.stderr.isatty() else _progress
    try:
        kernel = _kernel(args)
        result = json_safe(run_deploy(kernel, request, on_progress=progress))
    except DeployError as exc:
        raise UsageError(str(exc)) from None
    except (RuntimeError, MemoryError, OSError) as exc:  # the machine, not the input: no result
        text = " ".join(str(exc).split())[:300]
        print(f"kernelladder: error: deploy failed: {type(exc).__name__}: {text}", file=sys.stderr)
        return 1
    finally:
        if progress is _progress:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
    recorded = None
    if kernel.run_dir and not args.no_record:
        from kernelladder.deploy.record import record

        recorded = record(kernel.run_dir, result)
    if args.json:
        out = dict(result)
        if recorded is not None:
            out["recorded"] = {"seq": recorded.seq, "how": recorded.how}
        print(json.dumps(out), flush=True)
    else:
        for line in result_lines(result):
            print(line)
        if recorded is not None:
            where = f"event #{recorded.seq}" if recorded.seq is not None else ""
            print(f"recorded: {where} {recorded.how}".replace("  ", " "))
    return exit_code(result)


def _progress_lines(line: str) -> None:
    print(f"progress: {line}", file=sys.stderr, flush=True)


def _progress(line: str) -> None:
    sys.stderr.write(f"\r\033[K  {line[:100]}")
    sys.stderr.flush()
