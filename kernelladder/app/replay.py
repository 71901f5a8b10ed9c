"""Playing a saved run: position, play/pause, steps, jumps and speed over a timeline.

Playback follows the run's own clock scaled by the speed, with long idle gaps shortened
so a replay never sits still for minutes. Pure logic (no textual): the app's timer calls
`advance` and redraws when the position moved.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

from kernelladder.app.folding import ReplayTimeline
from kernelladder.engine import Event, RunFinished, read_events, read_log, writer_active

TORN_ENDING = "the log ends in a torn line (the run was killed)"  # as `kernelladder replay`

MAX_GAP_S = 2.0  # run time between two events, at most, before the speed applies
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


def load_events(run_dir: str | Path) -> list[Event]:
    """The run's events, read as the engine reads them (a torn last line left out)."""
    return read_events(run_dir)


def log_ending(run_dir: str | Path) -> str:
    """What a replay says at the end of a log that holds no RunFinished ("" when it does):
    the run was killed mid-line, it goes on in another process, or it stopped unrecorded."""
    read = read_log(run_dir)
    course = [e for e in read.events if not e.beside_the_run]  # a deploy after the end
    if course and isinstance(course[-1], RunFinished):
        return ""
    if read.torn:
        return TORN_ENDING
    if writer_active(run_dir):
        return "the log ends here: the run goes on in another process (--attach it)"
    return "the log ends before the run finished (killed?)"


class ReplayController:
    def __init__(self, events: Sequence[Event], *, speed: float = 1.0) -> None:
        self.timeline = ReplayTimeline(events)
        self.position = 0
        self.playing = False
        self.speed = speed
        self._run_clock: float | None = None  # playback time reached, on _play_times' scale
        self._play_times = _play_times(self.timeline.events)

    @property
    def total(self) -> int:
        return len(self.timeline)

    @property
    def at_end(self) -> bool:
        return self.position >= self.total

    def play(self) -> None:
        if self.at_end:
            self.position = 0
        self.playing = True
        self._run_clock = None

    def pause(self) -> None:
        self.playing = False

    def toggle(self) -> bool:
        if self.playing:
            self.pause()
        else:
            self.play()
        return self.playing

    def step(self, n: int) -> int:
        """Move n events (negative: back); pauses playback. Returns the new position."""
        self.playing = False
        return self.seek(self.position + n)

    def seek(self, position: int) -> int:
        self.position = max(0, min(position, self.total))
        self._run_clock = None
        return self.position

    def faster(self) -> float:
        bigger = [s for s in SPEEDS if s > self.speed]
        self.speed = bigger[0] if bigger else self.speed
        return self.speed

    def slower(self) -> float:
        smaller = [s for s in SPEEDS if s < self.speed]
        self.speed = smaller[-1] if smaller else self.speed
        return self.speed

    def advance(self, real_dt: float) -> int:
        """Play forward by `real_dt` seconds of wall time; returns the new position."""
        if not self.playing or self.at_end:
            self.playing = False
            return self.position
        times = self._play_times
        if self._run_clock is None:
            # Start from the event just shown (or the first), so the first tick moves.
            self._run_clock = times[self.position - 1] if self.position else times[0]
        self._run_clock += real_dt * self.speed
        self.position = bisect.bisect_right(times, self._run_clock, lo=self.position)
        if self.at_end:
            self.playing = False
        return self.position


def _play_times(events: Sequence[Event]) -> list[float]:
    """Each event's time on the playback clock: the run's clock with gaps over MAX_GAP_S
    shortened to MAX_GAP_S."""
    times: list[float] = []
    t = 0.0
    for i, e in enumerate(events):
        if i:
            t += min(max(e.ts - events[i - 1].ts, 0.0), MAX_GAP_S)
        times.append(t)
    return times
