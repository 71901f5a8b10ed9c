"""`kernelladder ops [OP|PROBLEM.py] [--json]`: the ops, their signatures and shape suites."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernelladder.cli import UsageError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ops",
        help="list the ops with their signatures and shape suites",
        description="List the built-in ops (or describe one op or KernelBench problem file).",
    )
    parser.add_argument(
        "op", nargs="?", help="one op name or a KernelBench problem .py to describe"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def describe_op(op: Any) -> dict[str, Any]:
    """describe() plus what a person choosing an op wants: baselines and the candidate."""
    info = op.describe()
    info["arg_names"] = list(op.arg_names)
    info["output_names"] = list(op.output_names)
    info["library_baselines"] = sorted(op.library_baselines())
    info["starting_candidate"] = op.starting_candidate
    info["forbidden_aten"] = sorted(op.forbidden_aten)
    return info


def run(args: argparse.Namespace) -> int:
    from kernelladder.ops.registry import OpLoadError, builtin_ops, load_op

    try:
        ops = [load_op(args.op)] if args.op else list(builtin_ops())
    except OpLoadError as exc:
        raise UsageError(str(exc)) from None
    infos = [describe_op(op) for op in ops]
    if args.json:
        json.dump({"ops": infos}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _print_table(infos, detail=bool(args.op))
    return 0


def _suite(shapes: list[dict[str, Any]]) -> str:
    return "\n".join(s["label"] for s in shapes)


def _print_table(infos: list[dict[str, Any]], detail: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="KernelLadder ops", show_lines=True)
    table.add_column("op", style="bold")
    table.add_column("signature")
    table.add_column("GPU shapes")
    table.add_column("CPU shapes")
    table.add_column("library baselines")
    for info in infos:
        name = info["name"] if info["kind"] == "builtin" else f"{info['name']} (KernelBench)"
        table.add_row(
            f"{name}\n[dim]{info['summary']}[/dim]",
            info["signature"],
            _suite(info["gpu_shapes"]),
            _suite(info["cpu_shapes"]),
            "\n".join([*info["library_baselines"], "torch.compile(reference)"]),
        )
    console.print(table)
    if detail:
        for info in infos:
            console.print(f"[bold]FENCE[/bold] for {info['name']}:", highlight=False)
            console.print(info["fence"], markup=False, highlight=False)
            if info["starting_candidate"]:
                console.print(f"starting candidate: {info['starting_candidate']}", highlight=False)
