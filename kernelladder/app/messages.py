"""App-level messages: how background work (the engine bridge) reaches the UI."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from textual.message import Message

from kernelladder.engine import Event


class EventsArrived(Message):
    """A batch of events from the engine, in log order (one message per 50-100 ms)."""

    def __init__(self, events: tuple[Event, ...], *, finished: bool = False) -> None:
        super().__init__()
        self.events = events
        self.finished = finished  # the event stream ended (the run is over)


class HostKeyQuestion(Message):
    """The engine's side asks whether to trust an unknown host key (any thread may post
    it); the answer goes to `answer` (a concurrent future: the engine may have its own
    loop)."""

    def __init__(self, error: Any, answer: Future[bool]) -> None:
        super().__init__()
        self.error = error  # kernelladder.engine.runners.ssh.link.HostKeyError, changed False
        self.answer = answer


class SteerRequested(Message):
    """The main screen asks the app to send a RunControl command to the engine (the app
    owns the bridge); `on_done` gets the command's result, e.g. a new branch's id."""

    def __init__(
        self, command: str, args: tuple[Any, ...], on_done: Callable[[Any], None] | None = None
    ) -> None:
        super().__init__()
        self.command = command
        self.args = args
        self.on_done = on_done


class ReplayToggled(Message):
    """The main screen asks the app to play or pause the replay."""


class ReplaySeekRequested(Message):
    """The main screen asks the app to move the replay to `position` (or by it)."""

    def __init__(self, position: int, *, relative: bool = False) -> None:
        super().__init__()
        self.position = position
        self.relative = relative


class ReplaySpeedRequested(Message):
    """The main screen asks the app to play the replay faster or slower."""

    def __init__(self, *, faster: bool) -> None:
        super().__init__()
        self.faster = faster


class DeployRequested(Message):
    """The main screen asks the app to deploy an attempt's kernel into a model (the app
    runs `kernelladder deploy` in a worker)."""

    def __init__(self, attempt: int) -> None:
        super().__init__()
        self.attempt = attempt


class DeployProgress(Message):
    """A deploy's progress line, from its worker."""

    def __init__(self, attempt: int, line: str) -> None:
        super().__init__()
        self.attempt = attempt
        self.line = line


class DeployFinished(Message):
    """A deploy ended: its record (app/deploys.py), or why it failed."""

    def __init__(self, attempt: int, record: dict[str, Any] | None, error: str = "") -> None:
        super().__init__()
        self.attempt = attempt
        self.record = record
        self.error = error
