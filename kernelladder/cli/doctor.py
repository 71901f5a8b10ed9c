"""`kernelladder doctor [--remote] [--trust] [--json]`: what a run needs, checked.

Local: Python, torch, triton, numpy, the GPUs and their names, the optional parts (the
TUI, the API and SSH clients) and the verifier workers kept warm for the next local run
(--stop-workers stops them). With --remote, for each configured host: the SSH
link (host key, key auth) and its round-trip time, the remote Python with torch, triton
and its GPUs (inside the container when one is set), the remote directory and whether
the synced verifier is current. Exit 1 when something a run needs is missing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import (
    SANDBOX_ENV,
    add_remote_arguments,
    add_sandbox_argument,
    load_remote,
    remote_requested,
)
from kernelladder.cli.doctor_probes import (
    FAIL,
    OK,
    PROBE,
    PROBE_FAILED,
    WARN,
    Check,
    probe_checks,
    run_probe_here,
    sandbox_check,
    sandbox_probe,
)
from kernelladder.cli.doctor_remote import ray_checks, remote_checks
from kernelladder.verifier.host import calibration

MIN_PYTHON = (3, 11)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check what a run needs (Python, torch, triton, GPUs; with --remote, the SSH hosts)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--remote", action="store_true", help="also check the SSH host(s)")
    p.add_argument(
        "--trust",
        action="store_true",
        help="add an UNKNOWN host key to known_hosts after showing its fingerprint "
        "(a changed key is never trusted)",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="what remote runs will use: cuda needs the configured GPUs (default), cpu the "
        "Triton interpreter only",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure this machine's GPU copy and matmul rates again (they are kept on disk "
        "per GPU, driver and torch, and re-measured after "
        f"{int(calibration.STALE_DAYS)} days)",
    )

    p.add_argument(
        "--stop-workers",
        action="store_true",
        help="stop the verifier workers kept warm for the next local run (--keep-workers), "
        "and the keeper holding them: their GPU memory is freed",
    )

    add_sandbox_argument(
        p,
        help_text="the walls runs will ask for: require makes a missing sandbox a failure "
        f"(default: {SANDBOX_ENV}, else auto)",
    )

    add_remote_arguments(p, with_remote_flag=False)

    p.add_argument(
        "--proposer",
        choices=("openai",),
        default=None,
        help="also ask a proposer's server: openai lists the models at --base-url",
    )
    p.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the OpenAI-compatible server for --proposer openai (default: OPENAI_BASE_URL, "
        "else OpenAI's; key from OPENAI_API_KEY)",
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help="also check the Ray cluster (--ray-address or KL_RAY_ADDRESS): its nodes, "
        "GPUs per node, Ray and torch versions on the nodes, the dashboard",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster (env KL_RAY_ADDRESS): auto, local, HOST:PORT; implies --ray",
    )
    p.set_defaults(func=run)


def run(args: Any) -> int:
    if args.base_url is not None and args.proposer is None:
        raise UsageError("--base-url goes with --proposer openai")
    remote = remote_requested(args)
    if args.trust and not remote:
        raise UsageError("--trust applies to --remote")
    config = load_remote(args) if remote else None  # UsageError (one line) on a bad setting
    ray_address = _ray_address(args)
    mode = sandbox_mode(args)
    checks = local_checks()
    checks.append(rates_check(args.recalibrate))
    checks.append(local_sandbox_check(mode))
    checks.append(kept_workers_check(stop=args.stop_workers))
    if config is not None:
        checks += asyncio.run(
            remote_checks(
                config, trust=args.trust, interactive=_tty(), device=args.device, sandbox=mode
            )
        )
    if ray_address is not None:
        checks += asyncio.run(ray_checks(ray_address, device=args.device))
    if args.proposer == "openai":
        checks.append(asyncio.run(openai_check(args.base_url)))
    if args.json:
        print(json.dumps({"ok": all_ok(checks), "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        print_table(checks)
    return 0 if all_ok(checks) else 1


def all_ok(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)


def sandbox_mode(args: Any) -> str:
    from kernelladder.verifier.contract.sandbox import mode_from_env

    return getattr(args, "sandbox", None) or mode_from_env()


def _ray_address(args: Any) -> str | None:
    """The cluster `--ray` checks (UsageError, one line, for a missing ray or address)."""
    from kernelladder.engine import MISSING_RAY, ray_installed, resolve_address

    if not args.ray and args.ray_address is None:
        return None
    address = resolve_address(args.ray_address)
    if not address:
        raise UsageError(
            "--ray needs --ray-address ADDR or KL_RAY_ADDRESS (auto, local, HOST:PORT)"
        )
    if not ray_installed():
        raise UsageError(MISSING_RAY)
    return address


# --- this machine ----------------------------------------------------------------------


def local_checks() -> list[Check]:
    checks = [
        Check(
            "local",
            "python",
            OK if sys.version_info >= MIN_PYTHON else FAIL,
            f"{sys.version.split()[0]} ({sys.executable})"
            + ("" if sys.version_info >= MIN_PYTHON else "; needs >= 3.11"),
        )
    ]
    try:
        probe = run_probe_here(PROBE, timeout_s=120)
    except PROBE_FAILED as exc:
        return [*checks, Check("local", "torch", FAIL, f"probe failed: {exc}")]
    checks += probe_checks("local", probe, min_python=None, gpus_needed=None)
    checks.append(ncu_check(bool(probe.get("gpus"))))
    for module, why in (
        ("rich", "terminal output"),
        ("textual", "the TUI"),
        ("networkx", "the strategy graph"),
        ("asyncssh", "--remote"),
        ("anthropic", "--proposer api"),
        ("openai", "--proposer openai"),
        ("textual_serve", "kernelladder serve"),
        ("ray", "--runner ray"),
    ):
        version = _module_version(module)
        status = OK if version else (FAIL if module in ("rich", "networkx") else WARN)
        checks.append(Check("local", module, status, version or f"not installed ({why})"))
    return checks


def local_sandbox_check(mode: str = "auto") -> Check:
    try:
        probe = run_probe_here(sandbox_probe(mode), timeout_s=60)
    except PROBE_FAILED as exc:
        probe = {"on": False, "line": f"off (the sandbox probe failed: {exc})"}
    return sandbox_check("local", probe, mode)


async def openai_check(base_url: str | None) -> Check:
    """The models an OpenAI-compatible server lists (GET /models)."""
    if _module_version("openai") is None:
        return Check("local", "openai server", FAIL, "openai not installed (pip install openai)")
    from kernelladder.engine import ProposerError, list_models

    try:
        url, names = await list_models(base_url)
    except ProposerError as exc:
        return Check("local", "openai server", FAIL, str(exc))
    if not names:
        return Check("local", "openai server", WARN, f"{url} serves no model")
    shown = ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
    return Check("local", "openai server", OK, f"{url} serves {shown}")


RATES_PROBE = """\
import json, torch
from kernelladder.verifier.worker.timing import GpuTimer
print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "rates": GpuTimer("cuda").rates()}))
"""


def rates_check(recalibrate: bool) -> Check:
    """The GPU rates kept on disk (calibration.py); with recalibrate, dropped and measured
    again on this machine's first GPU."""
    path = calibration.cache_file()
    if not recalibrate:
        entries = calibration.entries(path)
        if not entries:
            return Check("local", "gpu rates", OK, f"none kept yet ({path}): a run measures them")
        dates = ", ".join(
            f"{e.get('gpu')} ({str(e.get('measured_at'))[:10]})" for e in entries.values()
        )
        return Check("local", "gpu rates", OK, f"kept for {dates}; --recalibrate measures again")
    dropped = calibration.forget(path)
    try:
        measured = run_probe_here(RATES_PROBE, timeout_s=300)
    except PROBE_FAILED:
        return Check(
            "local", "gpu rates", WARN, f"{dropped} kept dropped; not measured (no GPU here?)"
        )
    identity = calibration.GpuIdentity(
        str(measured["gpu"]), calibration.driver_version(), str(measured["torch"])
    )
    rates = {k: float(v) for k, v in measured["rates"].items()}
    kept = calibration.write_rates(identity, rates, path=path)
    copy = rates.get("copy")
    line = (f"measured on {identity.gpu}: copy {copy / 1e9:.2f} TB/s" if copy else "measured") + (
        "" if kept else f" (not kept: {path} is not writable)"
    )
    return Check("local", "gpu rates", OK, line)


def kept_workers_check(stop: bool = False) -> Check:
    """The verifier workers the keeper holds for the next local run (verifier/host/keeper.py):
    pid, device, age, recipe; with `stop`, the keeper stopped and they with it."""
    from kernelladder.verifier.host import keeper, worker_template

    where = keeper.socket_path()
    try:
        if stop:
            templates = len(worker_template.stop_all())
            also = f"; stopped {templates} worker template(s)" if templates else ""
            stopped = keeper.stop()
            if stopped is None:
                return Check("local", "kept workers", OK, f"none: no keeper runs ({where}){also}")
            pids = ", ".join(map(str, stopped)) or "none held"
            return Check(
                "local", "kept workers", OK, f"stopped the keeper and its workers ({pids}){also}"
            )
        workers = keeper.list_kept()
    except (keeper.KeeperError, OSError) as exc:
        return Check("local", "kept workers", WARN, f"the keeper at {where}: {exc}")
    if not workers:
        return Check("local", "kept workers", OK, f"none ({where})")
    shown = "; ".join(
        f"pid {w.get('pid')} on "
        + (f"cuda:{w['cuda_device']}" if w.get("cuda_device") is not None else str(w.get("device")))
        + f", kept {float(w.get('age_s') or 0):.0f} s ago, {float(w.get('left_s') or 0):.0f} s "
        f"left, recipe {str(w.get('recipe'))[:12]}"
        for w in workers
    )
    return Check(
        "local",
        "kept workers",
        OK,
        f"{len(workers)} kept for the next local run: {shown} (--stop-workers stops them)",
    )


def ncu_check(has_gpu: bool) -> Check:
    """Nsight Compute for --profile auto: found, and able to read the GPU's counters."""
    from kernelladder.verifier.host.profile import availability, find_ncu

    ncu = find_ncu()
    if ncu is None:
        return Check("local", "ncu", WARN, "not found: runs go on without profiles")
    if not has_gpu:
        return Check("local", "ncu", WARN, f"{ncu}: no GPU here to profile on")
    ok, line = availability(ncu)
    return Check(
        "local", "ncu", OK if ok else WARN, line if ok else f"{line}: runs go on without profiles"
    )


def _module_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def print_table(checks: list[Check]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="kernelladder doctor", show_lines=False)
    table.add_column("where")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    style = {OK: "green", WARN: "yellow", FAIL: "bold red"}
    for c in checks:
        table.add_row(
            escape(c.scope), c.name, f"[{style[c.status]}]{c.status}[/]", escape(c.detail)
        )
    console = Console()
    console.print(table)
    failed = [c for c in checks if c.status == FAIL]
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed[/]: a run needs them")
    else:
        console.print("[green]ready[/]")
