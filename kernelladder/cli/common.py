"""The runner's arguments, shared by `check`, `optimize`, `doctor`, `serve` and
`kernelladder-tui`: --remote and the SSH settings, --sandbox, and reading them.

A bad remote setting raises UsageError (one line, exit 2); a host that cannot be
reached is reported when the runner starts (RemoteError, one line).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.verifier.contract import sandbox as sandbox_env


def add_remote_arguments(parser: argparse.ArgumentParser, *, with_remote_flag: bool = True) -> None:
    """The SSH settings (REMOTE_SETTINGS), after --remote as a run declares it."""
    from kernelladder.engine import OPTION_OF_FIELD, REMOTE, REMOTE_SETTINGS

    group = parser.add_argument_group(REMOTE)
    if with_remote_flag:
        remote = OPTION_OF_FIELD["remote"]
        group.add_argument(remote.flag, action="store_true", help=remote.help_text)
    for setting in REMOTE_SETTINGS:
        group.add_argument(
            setting.flag,
            dest=setting.dest,
            metavar=setting.metavar,
            default=None,
            help=setting.help,
        )


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """--remote and its settings, for a command that verifies candidates."""
    add_remote_arguments(parser, with_remote_flag=True)

    add_sandbox_argument(parser)


SANDBOX_ENV = sandbox_env.ENV_VAR
SANDBOX_HELP = (
    "walls around every worker (Landlock): auto runs with a warning where it is "
    f"missing (default; or {SANDBOX_ENV}), require refuses, off turns them off"
)


def add_sandbox_argument(parser: argparse.ArgumentParser, help_text: str = SANDBOX_HELP) -> None:
    """--sandbox, one spelling for every command that has it (its help may differ)."""
    parser.add_argument("--sandbox", choices=sandbox_env.MODES, default=None, help=help_text)


def apply_sandbox_choice(args: Any) -> None:
    """--sandbox reaches every worker this process starts, local or over SSH, through
    KERNELLADDER_SANDBOX (the transports read it)."""
    choice = getattr(args, "sandbox", None)
    if choice:
        os.environ[SANDBOX_ENV] = choice


def ray_requested(args: Any) -> bool:
    """--runner ray, or a Ray setting given explicitly (--ray-address / --ray-slots)."""
    return getattr(args, "runner", None) == "ray" or any(
        getattr(args, dest, None) is not None for dest in ("ray_address", "ray_slots")
    )


def ray_settings(args: Any) -> tuple[str, int | None]:
    """(address, slots) of a Ray run; UsageError (one line, exit 2) for a missing ray, a
    missing address or a bad slot count. Never imports ray."""
    from kernelladder.engine import MISSING_RAY, ray_installed, resolve_address

    if getattr(args, "runner", None) not in (None, "ray"):
        raise UsageError("--ray-address and --ray-slots go with --runner ray")
    if remote_requested(args):
        raise UsageError("--runner ray and --remote (SSH) do not go together")
    address = resolve_address(getattr(args, "ray_address", None))
    if not address:
        raise UsageError(
            "--runner ray needs --ray-address ADDR or KL_RAY_ADDRESS "
            "(auto: this machine's cluster; local: start one here)"
        )
    slots = getattr(args, "ray_slots", None)
    if slots is not None and slots < 1:
        raise UsageError(f"--ray-slots must be at least 1, not {slots}")
    if not ray_installed():
        raise UsageError(MISSING_RAY)
    return address, slots


def remote_requested(args: Any) -> bool:
    """--remote, or a host given explicitly (--ssh-target / --remote-config imply it). An
    empty one counts too (`--ssh-target "$UNSET"`): its check says so, instead of the
    run going local without a word."""
    from kernelladder.engine import REMOTE_SETTINGS

    names_a_host = [s.dest for s in REMOTE_SETTINGS if s.field in ("target", "config")]
    return bool(getattr(args, "remote", False)) or any(
        getattr(args, dest, None) is not None for dest in names_a_host
    )


def remote_settings(args: Any) -> Any:
    """The RemoteSettings the command line gave (None where an option was not given)."""
    from kernelladder.engine import REMOTE_SETTINGS, RemoteSettings

    return RemoteSettings(**{s.field: getattr(args, s.dest, None) for s in REMOTE_SETTINGS})


def load_remote(args: Any) -> Any:
    """The RemoteConfig the options and environment describe; UsageError when bad."""
    from kernelladder.engine import RemoteConfigError, load_remote_config

    try:
        return load_remote_config(remote_settings(args))
    except RemoteConfigError as exc:
        raise UsageError(str(exc)) from None


def remote_options(args: Any) -> dict[str, Any]:
    """What RunOptions.remote_config records (so `--resume` reconnects the same way): the
    settings given, keyed by RemoteSettings field."""
    from kernelladder.engine import REMOTE_SETTINGS

    return {
        s.field: getattr(args, s.dest)
        for s in REMOTE_SETTINGS
        if getattr(args, s.dest, None) is not None
    }


def require_local_gpu(device: str | None) -> None:
    """`--device cuda` on a machine without a GPU: one line, before anything is done."""
    from kernelladder.engine import default_device as local_device

    if device == "cuda" and local_device() != "cuda":
        raise UsageError("--device cuda: no CUDA GPU is available here (use --device cpu)")


def verify_remote(args: Any, request: dict[str, Any], on_progress: Any = None) -> Any:
    """One candidate through the remote runner (for `kernelladder check --remote`).
    request: the check's verify request (op, source, device, min_speedup, baselines);
    args.timeout is the wall-clock limit. A remote failure (host key, unreachable box,
    worker that does not start) raises WorkerUnavailable with one line."""
    import asyncio
    from dataclasses import replace

    from kernelladder.engine import RemoteError, RunnerLost, VerifyRequest
    from kernelladder.verifier.host.client import WorkerUnavailable

    config = load_remote(args)
    first = config.hosts[0]  # one candidate needs one worker: the first GPU of the first host
    config = replace(config, hosts=(replace(first, gpus=first.gpus[:1]),))
    verify_request = VerifyRequest(
        op=request["op"],
        source=request["source"],
        device=request.get("device") or "cuda",
        min_speedup=float(request.get("min_speedup", 1.0)),
        timeout_s=float(getattr(args, "timeout", None) or 300.0),
        baselines=bool(request.get("baselines", True)),
        unseen_seed=request.get("unseen_seed"),
    )

    async def once() -> Any:
        from kernelladder.engine import make_remote_runner

        runner = make_remote_runner(config, device=verify_request.device)
        try:
            await runner.start()
            return await runner.verify(verify_request, on_progress=on_progress)
        finally:
            await runner.close()

    try:
        return asyncio.run(once())
    except (RemoteError, RunnerLost) as exc:
        raise WorkerUnavailable(f"remote: {' '.join(str(exc).split())}") from None


def json_safe(obj: Any) -> Any:
    """JSON without NaN/Infinity (strict parsers reject them): such a float as its text."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
