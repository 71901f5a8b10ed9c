"""Starting a remote runner before the run, from the engine's loop: an UNKNOWN host key
is shown to the person (fingerprint) and, when trusted, recorded and tried again. A
changed key is never offered. Beside bridge.py: the app sets it as the bridge's
`prepare` step for a run with a remote runner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


async def start_remote_runner(run: Any, ask_trust: Callable[[Any], Awaitable[bool]]) -> None:
    """Start `run`'s runner; `ask_trust(HostKeyError)` asks the person about an unknown
    key. A start that succeeds is the run's (the runner starts once); a failure (or a
    refusal) is handed to the run, which records it as its own start failure without
    connecting again."""
    from kernelladder.engine import HostKeyError, trust_host_key

    runner = getattr(run, "runner", None)
    if runner is None:
        return

    def hand_over(error: Exception) -> None:
        failed = getattr(run, "runner_start_failed", None)
        if failed is not None:  # else (not an engine Run) its own start tries again
            failed(error)

    while True:
        try:
            await runner.start()
            return
        except HostKeyError as exc:
            offered = not exc.changed and exc.key is not None and exc.known_hosts is not None
            if not offered or not await ask_trust(exc):
                hand_over(exc)
                return
            try:
                trust_host_key(exc.known_hosts, exc.host, exc.port, exc.key)
            except OSError as err:  # e.g. known_hosts not writable: the run says so
                hand_over(err)
                return
        except Exception as exc:  # the run records it, in its log and on screen
            hand_over(exc)
            return
