"""Remote verification over SSH: a pool of hosts and their GPUs, each reached over a
verified connection (its host key checked), with the verifier's tree mirrored there by
content. Its modules are imported only when a run is remote: they need asyncssh.

This file declares the runner (RUNNER): asked for with --remote, recorded with the SSH
settings given (their flags: config.py's REMOTE_SETTINGS, added by cli/common.py)."""

from __future__ import annotations

from typing import Any

from kernelladder.engine.run.rows import ON, Reading, RunOption
from kernelladder.engine.runners.kind import RunnerKind

REMOTE = "remote verification over SSH (see REMOTE_SETUP.md)"  # its section of --help
# the remote settings, each with its own flag (config.py's REMOTE_SETTINGS)
SSH_SETTINGS = Reading("ssh-settings", "dict[str, Any]")


def _make(options: Any, device: str, per_gpu: int) -> Any:
    from kernelladder.engine.runners.ssh.config import load_remote_config, settings_from_record
    from kernelladder.engine.runners.ssh.pool import make_remote_runner

    settings = settings_from_record(options.remote_config or {})
    return make_remote_runner(load_remote_config(settings), device=device, per_gpu=per_gpu)


RUNNER = RunnerKind(
    name="ssh",
    make=_make,
    rows=(
        RunOption("remote", "--remote", "verify on the GPU box(es) over SSH (KL_SSH_TARGET or "
                  "--remote-config)", default=False, reads=ON, group=REMOTE, composed=True),
        # the remote settings given, keyed by RemoteSettings field, so a resume reconnects
        # the same way
        RunOption("remote_config", None, default=dict, reads=SSH_SETTINGS, group=REMOTE,
                  composed=True),
    ),
    chosen=lambda options: bool(getattr(options, "remote", False)),
    asked_by="--remote",
    summary="SSH",
    elsewhere=True,
    device=lambda options: "cuda",  # the box's GPUs
    starting="connecting to the GPU box and starting its verifier worker",
    place=1,
)  # fmt: skip
