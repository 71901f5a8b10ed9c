"""The selected attempt's live log. Only this one attempt's lines are ever rendered."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import Log

MAX_LINES = 5_000


class AttemptLog(Log):
    DEFAULT_CSS = """
    AttemptLog {
        background: $surface;
        color: $foreground;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, **kwargs)
        self.attempt: int | None = None
        self.shown = 0  # lines of this attempt written so far

    def show_attempt(self, attempt: int | None, lines: Sequence[str]) -> None:
        """Switch to another attempt (or rewind): replace every line."""
        self.attempt = attempt
        self.clear()
        self.shown = 0
        if attempt is None:
            self.write_line("no attempt selected")
            return
        self.append(lines)

    def append(self, lines: Sequence[str]) -> None:
        if lines:
            self.write_lines(lines)
            self.shown += len(lines)
