"""The header: what is being optimized, where, by whom, how far, and at what cost."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.widget import Widget

from kernelladder.app import format as fmt
from kernelladder.app import view as v

NO_GPU = "speed not measured (no GPU)"


class RunHeader(Widget):
    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    def __init__(self, *, clock: Callable[[], float], replay: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self._clock = clock
        self._replay = replay
        self._view: v.RunView = v.EMPTY_VIEW

    def on_mount(self) -> None:
        # The elapsed time ticks even when no event arrives.
        self.set_interval(1.0, self.refresh, name="header-clock")

    def show(self, view: v.RunView) -> None:
        if view is not self._view:
            self._view = view
            self.refresh()

    def elapsed(self) -> float | None:
        # A replay shows the run's own time at the replayed event, never the wall clock.
        return self._view.elapsed(None if self._replay else self._clock())

    def render(self) -> Content:
        view = self._view
        if not view.op:
            return Content.assemble(("KernelLadder", "bold $primary"), "  waiting for the run…")
        first = header_line(view)
        second = status_line(view, self.elapsed())
        return Content("\n").join([first, second])


def header_line(view: v.RunView) -> Content:
    device = view.device or "?"
    if view.gpu:
        device = f"{device} {view.gpu}"
    parts: list[tuple[str, str] | str] = [
        ("KernelLadder", "bold $primary"),
        "  ",
        (view.op, "bold"),
        f" ({view.op_kind})" if view.op_kind != "builtin" else "",
        "  on ",
        (device, "bold"),
    ]
    if view.runner and view.runner != "local":
        parts.append(f" via {view.runner}")
    if not view.speed_measured:
        parts += ["  ", (NO_GPU, "bold $warning")]
    proposer = view.proposer + (f"/{view.model}" if view.model else "")
    parts += ["  proposer ", (proposer, "bold")]
    parts += ["  target ", (fmt.speedup(view.target, unmeasured="none"), "bold")]
    return Content.assemble(*parts)


def status_line(view: v.RunView, elapsed: float | None) -> Content:
    settings = view.settings or {}
    max_attempts = settings.get("max_attempts")
    time_limit = settings.get("time_limit_s")
    budget_usd = settings.get("budget_usd")
    attempts = f"{view.attempts_judged}" + (f"/{max_attempts}" if max_attempts else "")
    time_used = fmt.duration(elapsed) + (f"/{fmt.duration(time_limit)}" if time_limit else "")
    cost = fmt.usd(view.cost_usd) + (f"/{fmt.usd(budget_usd)}" if budget_usd else "")
    if view.best_attempt is None:
        best: list[tuple[str, str] | str] = [("none yet", "$text-muted")]
    else:
        shown = (
            fmt.speedup(view.best_speedup) if view.speed_measured else "passes (speed not measured)"
        )
        best = [(f"#{view.best_attempt} {shown}", "bold $success")]
        if view.best_floor_fraction is not None:
            best.append(f" ({fmt.percent(view.best_floor_fraction)} of floor)")
    state_style = {
        v.RUN_RUNNING: "bold $success",
        v.RUN_PAUSED: "bold $warning",
        v.RUN_STOPPING: "bold $warning",
        v.RUN_FINISHED: "bold $primary",
    }.get(view.state, "bold")
    state = view.state
    if view.state == v.RUN_FINISHED and view.finish_reason:
        state = f"finished: {view.finish_reason}"
    gates = f"  gates {len(view.gates)} waiting" if view.gates else ""
    return Content.assemble(
        "elapsed ",
        (time_used, "bold"),
        "  attempts ",
        (attempts, "bold"),
        "  best ",
        *best,
        "  cost ",
        (cost, "bold"),
        (gates, "bold $warning"),
        "  ",
        (state, state_style),
    )
