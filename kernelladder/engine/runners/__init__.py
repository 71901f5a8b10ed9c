"""Runners: where candidates are verified, each implementing engine.protocols.Runner
(the local worker pool, remote hosts over SSH, a Ray cluster); make_runner picks a run's
runner from its options. A remote or Ray runner's modules (asyncssh, ray) are imported
only when a run asks for one."""

from kernelladder.engine.runners.local import LocalRunner, default_device, make_runner

__all__ = ["LocalRunner", "default_device", "make_runner"]
