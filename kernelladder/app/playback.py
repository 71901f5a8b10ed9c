"""Playing a saved run in the app: the playback clock, play and pause, step and seek,
speed, and each position's view shown on the main screen with the notices its events
gave, and the replay bar kept up to date."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kernelladder.app import view as v
from kernelladder.app.replay import ReplayController
from kernelladder.app.widgets.replay_bar import ReplayBar
from kernelladder.engine import events as ev

PLAYBACK_TICK_S = 0.1


class ReplayPlayback:
    """Mixed into the app (a textual App), which holds what these read: the replay's
    player, the main screen, where the log ended, and how a batch's notices are shown."""

    player: ReplayController | None
    main: Any
    log_ending: str
    _at_end: bool
    _last_tick: float
    _notify_events: Callable[[Sequence[ev.Event]], None]

    def _start_replay(self) -> None:
        if not self.main.is_mounted:  # a busy machine: the screen's widgets come later
            self.call_after_refresh(self._start_replay)
            return
        player = self.player
        assert player is not None
        if self._at_end:
            player.seek(player.total)
        else:
            player.play()
        self._render_replay(rewind=True)
        self._last_tick = time.monotonic()
        self.set_interval(PLAYBACK_TICK_S, self._playback_tick, name="replay-playback")

    def _playback_tick(self) -> None:
        player = self.player
        assert player is not None
        if not self._replay_widgets():  # the app is closing (or not drawn yet)
            return
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        if not player.playing:
            return
        before = player.position
        player.advance(dt)
        if player.position != before:
            self._render_replay(stepped=player.position - before)
        else:
            self._update_replay_bar()

    def replay_toggle(self) -> None:
        assert self.player is not None
        self.player.toggle()
        self._last_tick = time.monotonic()
        if self.player.position == 0:
            self._render_replay(rewind=True)
        self._update_replay_bar()

    def replay_seek(self, position: int, *, relative: bool = False) -> None:
        player = self.player
        assert player is not None
        before = player.position
        if relative:
            player.step(position)
        else:
            player.pause()
            player.seek(position)
        if player.position != before:
            moved = player.position - before
            self._render_replay(stepped=moved, rewind=moved < 0)
        self._update_replay_bar()

    def replay_speed(self, *, faster: bool) -> None:
        assert self.player is not None
        speed = self.player.faster() if faster else self.player.slower()
        self._update_replay_bar()
        self.notify(f"replay speed ×{speed:g}", timeout=1.5)

    def _render_replay(self, *, stepped: int = 0, rewind: bool = False) -> None:
        player = self.player
        assert player is not None
        view = player.timeline.view_at(player.position)
        if player.position == player.total:
            view = v.log_end_view(view, self.log_ending)
        self.main.show(
            view,
            before_seq=player.timeline.seq_at(player.position),
            rewind=rewind,
            immediate=not player.playing,
        )
        if 0 < stepped <= 50:
            shown = player.timeline.events[player.position - stepped : player.position]
            self._notify_events(shown)
        self._update_replay_bar()

    def _replay_widgets(self) -> bool:
        """Whether the main screen's widgets are there to show a replay step on: a tick
        can fire as the app closes and removes them, or before they are mounted."""
        return self.main.is_mounted and bool(self.main.query(ReplayBar))

    def _update_replay_bar(self) -> None:
        if self.player is None or not self._replay_widgets():
            return
        bar = self.main.query_one(ReplayBar)
        bar.position = self.player.position
        bar.total = self.player.total
        bar.playing = self.player.playing
        bar.speed = self.player.speed
