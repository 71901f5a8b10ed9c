"""Runners: where candidates are verified.

    local.py    LocalRunner: the verifier's long-lived local workers (one per GPU, or
                one CPU interpreter worker); make_runner picks a run's runner
    ssh/        remote hosts over SSH: config (settings, hosts), link (one connection),
                sync (the verifier tree on the box), pool (the SSH runner and pool)

Every runner implements engine.protocols.Runner. The SSH modules import asyncssh, so
nothing here imports them until a remote run asks for them.
"""

from kernelladder.engine.runners.local import LocalRunner, default_device, make_runner

__all__ = ["LocalRunner", "default_device", "make_runner"]
