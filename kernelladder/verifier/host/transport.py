"""How the caller reaches a worker process: the `Transport` protocol (a local subprocess,
or one the SSH runner supplies), reads with a deadline, and an exit status in words."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Protocol


class Transport(Protocol):
    """How a worker process is reached. After `start()`: `stdin` has write(bytes) and
    async drain(); `stdout` and `stderr` have async readline()."""

    stdin: Any
    stdout: Any
    stderr: Any

    async def start(self) -> None: ...

    async def kill(self) -> None:
        """Kill the whole worker (process group / remote process); idempotent."""
        ...

    async def wait(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal)."""
        ...

    def describe(self) -> str: ...


async def within(awaitable: Any, timeout: float) -> Any:
    """Await with a deadline. Unlike asyncio.wait_for on Python 3.11, a cancellation that
    lands as the awaited read completes is never swallowed (a stopped run must stop)."""
    async with asyncio.timeout(timeout):
        return await awaitable


def signal_text(code: int | None) -> str:
    """A worker's exit status in words."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
