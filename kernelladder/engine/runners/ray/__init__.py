"""Verification on a Ray cluster: one actor per GPU (or N CPU actors) owning verifier
workers on its node (runner.py, actor.py; cluster.py connects and probes). Nothing here
imports ray: a run that asks for this runner imports it as the runner starts.

This file declares the runner (RUNNER): `--runner ray` or --ray-address, whose address
the command line resolves (cli/common.py's ray_settings: KL_RAY_ADDRESS, auto, local)."""

from __future__ import annotations

from typing import Any

from kernelladder.engine.run.rows import INTEGER, RunOption
from kernelladder.engine.runners.kind import RunnerKind

RAY = "verification on a Ray cluster (docs/RUNNING.md)"  # its section of --help


def _make(options: Any, device: str, per_gpu: int) -> Any:
    from kernelladder.engine.runners.ray.runner import RayRunner  # imports ray only in start()

    return RayRunner(options.ray_address, device=device, slots=options.ray_slots, per_gpu=per_gpu)


def _check(options: Any) -> str:
    from kernelladder.engine.runners.ray.cluster import MISSING_RAY, ray_installed

    return "" if ray_installed() else MISSING_RAY


RUNNER = RunnerKind(
    name="ray",
    make=_make,
    rows=(
        # a Ray run may find its cluster at a new address
        RunOption("ray_address", "--ray-address", "the Ray cluster (env KL_RAY_ADDRESS): auto "
                  "(the one this machine joined), local (start one in this process), HOST:PORT "
                  "or ray://HOST:PORT; implies --runner ray", metavar="ADDR", resumable=True,
                  group=RAY, composed=True),
        RunOption("ray_slots", "--ray-slots", "N CPU actors (Triton interpreter) on a cluster "
                  "without GPUs; with --device cuda, at most N GPU actors", reads=INTEGER,
                  metavar="N", resumable=True, group=RAY, composed=True),
    ),
    chosen=lambda options: getattr(options, "ray_address", None) is not None,
    summary="Ray actors, one per GPU of the cluster",
    elsewhere=True,
    # CPU actors with --ray-slots, else the cluster's GPUs
    device=lambda options: "cpu" if options.ray_slots is not None else "cuda",
    starting="connecting to the Ray cluster and starting its verifier actors",
    check=_check,
    place=2,
)  # fmt: skip
