"""Runner options shared by `check`, `optimize`, `doctor` and `kernelladder-tui`.

    add_runner_arguments(parser)        # --remote and the SSH settings
    runner = make_runner(args, device)  # LocalRunner, or the SSH runner / pool

A bad remote setting raises UsageError (one line, exit 2); a host that cannot be
reached is reported when the runner starts (RemoteError, one line).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from kernelladder.cli import UsageError

REMOTE_OPTIONS = (
    ("--ssh-target", "ssh_target", "USER@HOST[:PORT]", "the GPU box (env KL_SSH_TARGET)"),
    ("--ssh-key", "ssh_key", "PATH", "private key file (env KL_SSH_KEY; key auth only)"),
    (
        "--known-hosts",
        "known_hosts",
        "PATH",
        "known_hosts file (env KL_SSH_KNOWN_HOSTS; default ~/.ssh/known_hosts)",
    ),
    ("--container", "container", "NAME", "run the worker via `docker exec` (env KL_CONTAINER)"),
    (
        "--remote-python",
        "remote_python",
        "PATH",
        "Python on the box (env KL_REMOTE_PYTHON; default ~/kl-venv/bin/python)",
    ),
    (
        "--remote-dir",
        "remote_dir",
        "PATH",
        "where the verifier is synced on the box (env KL_REMOTE_DIR; default ~/work/kernelladder)",
    ),
    (
        "--remote-config",
        "remote_config",
        "FILE",
        "TOML file listing several hosts and their GPUs (env KL_REMOTE_CONFIG)",
    ),
    (
        "--gpus",
        "remote_gpus",
        "LIST",
        "GPU indices on the box, e.g. 0,1 (default 0); they index the box's own "
        "CUDA_VISIBLE_DEVICES when its login sets one",
    ),
)


def add_remote_arguments(parser: argparse.ArgumentParser, *, with_remote_flag: bool = True) -> None:
    group = parser.add_argument_group("remote verification over SSH (see REMOTE_SETUP.md)")
    if with_remote_flag:
        group.add_argument(
            "--remote",
            action="store_true",
            help="verify on the GPU box(es) over SSH (KL_SSH_TARGET or --remote-config)",
        )
    for flag, dest, metavar, text in REMOTE_OPTIONS:
        group.add_argument(flag, dest=dest, metavar=metavar, default=None, help=text)


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """--remote and its settings, for a command that verifies candidates."""
    add_remote_arguments(parser, with_remote_flag=True)

    add_sandbox_argument(parser)


SANDBOX_ENV = "KERNELLADDER_SANDBOX"


def add_sandbox_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sandbox",
        choices=("auto", "require", "off"),
        default=None,
        help="walls around every worker (Landlock): auto runs with a warning where it is "
        "missing (default; or KERNELLADDER_SANDBOX), require refuses, off turns them off",
    )


def apply_sandbox_choice(args: Any) -> None:
    """--sandbox reaches every worker this process starts, local or over SSH, through
    KERNELLADDER_SANDBOX (the transports read it)."""
    choice = getattr(args, "sandbox", None)
    if choice:
        os.environ[SANDBOX_ENV] = choice


def remote_requested(args: Any) -> bool:
    """--remote, or a host given explicitly (--ssh-target / --remote-config imply it). An
    empty one counts too (`--ssh-target "$UNSET"`): its check says so, instead of the
    run going local without a word."""
    return bool(getattr(args, "remote", False)) or any(
        getattr(args, dest, None) is not None for dest in ("ssh_target", "remote_config")
    )


def remote_settings(args: Any) -> Any:
    from kernelladder.engine.remote_config import RemoteSettings

    return RemoteSettings(
        target=getattr(args, "ssh_target", None),
        key=getattr(args, "ssh_key", None),
        known_hosts=getattr(args, "known_hosts", None),
        container=getattr(args, "container", None),
        python=getattr(args, "remote_python", None),
        remote_dir=getattr(args, "remote_dir", None),
        config=getattr(args, "remote_config", None),
        gpus=getattr(args, "remote_gpus", None),
    )


def load_remote(args: Any) -> Any:
    """The RemoteConfig the options and environment describe; UsageError when bad."""
    from kernelladder.engine.remote_config import RemoteConfigError, load_remote_config

    try:
        return load_remote_config(remote_settings(args))
    except RemoteConfigError as exc:
        raise UsageError(str(exc)) from None


def remote_options(args: Any) -> dict[str, Any]:
    """What RunOptions.remote_config records (so `--resume` reconnects the same way)."""
    return {
        dest: getattr(args, dest)
        for _, dest, _, _ in REMOTE_OPTIONS
        if getattr(args, dest, None) is not None
    }


def require_local_gpu(device: str | None) -> None:
    """`--device cuda` on a machine without a GPU: one line, before anything is done."""
    from kernelladder.engine.runners import default_device as local_device

    if device == "cuda" and local_device() != "cuda":
        raise UsageError("--device cuda: no CUDA GPU is available here (use --device cpu)")


def default_device(args: Any) -> str:
    """--device if given; remote runs default to cuda (the box's GPUs); local to cuda
    when this machine has one, else the CPU interpreter."""
    device = getattr(args, "device", None)
    if device:
        return device
    if remote_requested(args):
        return "cuda"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def verify_remote(args: Any, request: dict[str, Any], on_progress: Any = None) -> Any:
    """One candidate through the remote runner (for `kernelladder check --remote`).
    request: the check's verify request (op, source, device, min_speedup, baselines);
    args.timeout is the wall-clock limit. A remote failure (host key, unreachable box,
    worker that does not start) raises WorkerUnavailable with one line."""
    import asyncio
    from dataclasses import replace

    from kernelladder.engine.protocols import RunnerLost, VerifyRequest
    from kernelladder.engine.ssh_link import RemoteError
    from kernelladder.verifier.client import WorkerUnavailable

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
        from kernelladder.engine.ssh import make_remote_runner

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


def make_runner(args: Any, device: str) -> Any:
    """A Runner: the SSH runner (one host) or pool (several) when remote verification was
    asked for, else the local worker pool."""
    if remote_requested(args):
        from kernelladder.engine.ssh import make_remote_runner

        return make_remote_runner(load_remote(args), device=device)
    from kernelladder.engine.runners import LocalRunner

    return LocalRunner(device=device)
