"""App-level messages: how background work (the engine bridge) reaches the UI."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from textual.message import Message

from kernelladder.engine.events import Event


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
