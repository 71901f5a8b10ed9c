"""`kernelladder replay RUN_DIR`: fold a saved run's log and print its summary.

`--json` prints exactly what `kernelladder optimize --json` printed at the end of the
live run. `--reverify` re-runs the saved attempts through the verifier on this machine
and reports what changed: verdicts, and speed only where both runs measured it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

from kernelladder.cli import UsageError

SPEED_TOLERANCE = 0.10  # relative speed change worth reporting on re-verification


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay", help="summarize (or re-verify) a saved run", description=__doc__.splitlines()[0]
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--reverify", action="store_true",
                   help="re-run the saved attempts through the verifier here")  # fmt: skip
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="--reverify: default cuda when available")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, help="--reverify: per candidate")
    p.set_defaults(func=run)


def read_run_log(run_dir: str | Path) -> Any:
    """The run's log as the engine reads it (engine.log.LogRead); one line (UsageError)
    when it cannot be read or holds no event. `replay` and `kernelladder-tui --replay`.
    A log recorded before verdicts carried vs best gets it from its saved verdicts
    (standing_backfill), so an old run leads with its standing as a new one does."""
    import dataclasses

    from kernelladder.engine import LogError, fill_standing, read_log

    try:
        read = read_log(run_dir)
    except LogError as exc:
        raise UsageError(str(exc)) from None
    if not read.events:
        why = " (its only line is cut short or not an event)" if read.torn else ""
        raise UsageError(f"{run_dir}: the log holds no events{why}")
    return dataclasses.replace(read, events=fill_standing(read.events, run_dir))


def load_state(run_dir: str) -> Any:
    from kernelladder.engine import fold

    read = read_run_log(run_dir)
    return fold(read.events), read.torn


def compare_verdicts(old: dict[str, Any], new: Any) -> dict[str, Any] | None:
    """A difference worth reporting between a saved verdict and a fresh one, or None."""
    changes: dict[str, Any] = {}
    if old.get("verdict") != new.verdict or old.get("gate") != new.gate:
        changes["verdict"] = [
            f"{old.get('verdict')}" + (f" at {old.get('gate')}" if old.get("gate") else ""),
            f"{new.verdict}" + (f" at {new.gate}" if new.gate else ""),
        ]
    before, after = old.get("speedup"), new.speedup
    if before is not None and after is not None and before > 0:
        change = after / before - 1.0
        if abs(change) > SPEED_TOLERANCE:
            changes["speedup"] = [before, after, round(change, 4)]
    return changes or None


async def reverify(run_dir: str, state: Any, device: str | None, timeout_s: float) -> dict:
    from kernelladder.engine import (
        LocalRunner,
        LogError,
        OpInfo,
        RunnerLost,
        VerifyRequest,
        default_device,
        one_line,
        read_attempt_source,
        read_attempt_verdict,
        read_meta,
    )

    try:
        op = OpInfo.from_dict(read_meta(run_dir)["op"])
    except LogError as exc:
        raise UsageError(f"cannot re-verify: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise UsageError(
            f"{run_dir}: cannot re-verify: meta.json has no usable op ({why})"
        ) from None
    device = device or default_device()
    runner = LocalRunner(device=device)
    report: dict[str, Any] = {"device": device, "checked": 0, "differences": [], "errors": []}
    await runner.start()
    try:
        for n in sorted(state.attempts):
            a = state.attempts[n]
            if a.verdict is None:
                continue
            try:
                source = read_attempt_source(run_dir, n)
                old = read_attempt_verdict(run_dir, n)
            except (OSError, ValueError) as exc:
                report["errors"].append({"attempt": n, "error": one_line(exc)})
                continue
            request = VerifyRequest(op=op.wire, source=source, device=device, timeout_s=timeout_s)
            try:
                new = await runner.verify(request)
            except RunnerLost as exc:
                report["errors"].append({"attempt": n, "error": one_line(exc)})
                continue
            report["checked"] += 1
            diff = compare_verdicts(old, new)
            if diff:
                report["differences"].append({"attempt": n, **diff})
    finally:
        await runner.close()
    return report


def deploy_report(state: Any) -> list[str]:
    """Each attempt's last deploy into each model, in full (kernelladder deploy)."""
    from kernelladder.deploy.result import result_lines

    latest: dict[tuple, dict] = {}
    for d in state.deploys:
        latest[(d["attempt"], d["model"])] = d
    lines: list[str] = []
    for d in latest.values():
        lines.append(f"deploy recorded as event #{d['seq']}: {d['status']}")
        lines += [f"  {line}" for line in result_lines(d["result"])]
    return lines


def _check_reverify_options(args: argparse.Namespace) -> None:
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        # a zero or negative limit turned every saved pass into a "fail at timeout" change
        raise UsageError("--timeout must be a positive number of seconds")
    from kernelladder.cli.common import require_local_gpu

    require_local_gpu(args.device)


def run(args: argparse.Namespace) -> int:
    from kernelladder.engine import RunnerLost, summarize, writer_active

    if args.reverify:
        _check_reverify_options(args)
    state, torn = load_state(args.run_dir)
    summary = summarize(state)
    report = None
    if args.reverify:
        try:
            report = asyncio.run(reverify(args.run_dir, state, args.device, args.timeout))
        except RunnerLost as exc:  # the worker did not start: nothing was re-verified
            line = " ".join(str(exc).split())
            print(
                f"kernelladder: error: the verifier worker did not start: {line}", file=sys.stderr
            )
            return 1
    if args.json:
        out = dict(summary)
        if report is not None:
            out["reverify"] = report
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    from rich.console import Console

    from kernelladder.app.headless import render_state
    from kernelladder.app.verdict_report import end_of_run_lines

    console = Console(highlight=False)
    console.print(render_state(state, recorded=True))
    for line in end_of_run_lines(args.run_dir, state):
        console.print(line, markup=False)
    for line in deploy_report(state):
        console.print(line, markup=False)
    if not state.finished and writer_active(args.run_dir):
        console.print("[yellow]the run is still running (another process is writing its log)[/]")
    else:
        if torn:
            console.print("[yellow]the log ends in a torn line (the run was killed); `optimize "
                          "--resume` repairs it[/]")  # fmt: skip
        if not state.finished:
            console.print(
                "[yellow]the run did not finish; `optimize --resume RUN_DIR` continues it[/]"
            )
    if report is not None:
        console.print(f"re-verified {report['checked']} attempts on {report['device']}")
        for d in report["differences"]:
            console.print(
                f"  #{d['attempt']}: "
                + ", ".join(f"{k} {v}" for k, v in d.items() if k != "attempt")
            )
        for e in report["errors"]:
            console.print(f"  [red]#{e['attempt']}: {e['error']}[/]")
        if not report["differences"]:
            console.print("  no differences")
    return 0
