"""Runners: where candidates are verified, each implementing engine.protocols.Runner.
The local worker pool (local.py) is the default; every other runner is a folder, ssh/,
ray/, ..., declaring its RunnerKind in its __init__.py (registry.py finds them);
make_runner builds the one a run's options ask for. A runner's own modules (asyncssh,
ray) are imported only when a run asks for it.

Names are looked up on first use: the run's options import the registry from here
(runners/registry.py), and local.py imports the run's options."""

from __future__ import annotations

from typing import Any

__all__ = ["LocalRunner", "default_device", "make_runner"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kernelladder.engine.runners import local

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
