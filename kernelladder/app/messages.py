"""App-level messages: how background work (the engine bridge) reaches the UI."""

from __future__ import annotations

from textual.message import Message

from kernelladder.engine.events import Event


class EventsArrived(Message):
    """A batch of events from the engine, in log order (one message per 50-100 ms)."""

    def __init__(self, events: tuple[Event, ...], *, finished: bool = False) -> None:
        super().__init__()
        self.events = events
        self.finished = finished  # the event stream ended (the run is over)
