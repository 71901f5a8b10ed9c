"""App-level messages: how background work (the engine bridge, replay) reaches the UI."""

from __future__ import annotations

from textual.message import Message

from kernelladder.engine.events import Event


class EventsArrived(Message):
    """A batch of events from the engine, in log order (one message per 50-100 ms)."""

    def __init__(self, events: tuple[Event, ...], *, finished: bool = False) -> None:
        super().__init__()
        self.events = events
        self.finished = finished  # the event stream ended (the run is over)


class CommandFailed(Message):
    """A steering command was refused by the engine (ValueError: one line)."""

    def __init__(self, command: str, error: str) -> None:
        super().__init__()
        self.command = command
        self.error = error


class ReplayMoved(Message):
    """The replay position changed (a step, a jump or playback)."""

    def __init__(self, position: int, *, stepped: int) -> None:
        super().__init__()
        self.position = position
        self.stepped = stepped  # events moved forward (negative: back)
