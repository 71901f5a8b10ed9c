"""Where a replay stands: position, playing or paused, speed; steering is off."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

BAR_WIDTH = 24


class ReplayBar(Widget):
    DEFAULT_CSS = """
    ReplayBar {
        height: 1;
        background: $secondary 30%;
        color: $foreground;
        padding: 0 1;
    }
    """

    position: reactive[int] = reactive(0)
    total: reactive[int] = reactive(0)
    playing: reactive[bool] = reactive(False)
    speed: reactive[float] = reactive(1.0)

    def render(self) -> Content:
        total = max(self.total, 1)
        filled = round(BAR_WIDTH * self.position / total)
        state = ("▶ playing", "bold $success") if self.playing else ("■ paused", "bold $warning")
        return Content.assemble(
            ("REPLAY ", "bold $secondary"),
            state,
            f" ×{self.speed:g}  ",
            ("█" * filled, "$primary"),
            ("░" * (BAR_WIDTH - filled), "$text-muted"),
            f"  event {self.position:,}/{self.total:,}  ",
            ("steering is off in a replay", "$text-muted"),
        )
