"""The header: what is being optimized, where, by whom, how far, and at what cost."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.widget import Widget

from kernelladder.app import format as fmt
from kernelladder.app import view as v

NO_GPU = "speed not measured (no GPU)"
RATE_AFTER_S = 5.0  # attempts per minute shown once the run has run this long


class RunHeader(Widget):
    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        replay: bool = False,
        starting: str = "",
        attached: str = "",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self._clock = clock
        self._replay = replay
        self._attached = attached  # whose run this app watches, when another process owns it
        self._starting = starting  # shown until the first event
        self._view: v.RunView = v.EMPTY_VIEW

    def on_mount(self) -> None:
        # The elapsed time ticks even when no event arrives.
        self.set_interval(1.0, self.refresh, name="header-clock")

    def set_attached(self, owner: str) -> None:
        self._attached = owner
        self.refresh()

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
            waiting = self._starting or "waiting for the run…"
            line = Content.assemble(("KernelLadder", "bold $primary"), "  ", waiting)
            width = self.size.width or None
            return line if width is None else line.truncate(width, ellipsis=True)
        # Each line fits the width: two lines of height 2 must never wrap into a third
        # that is cut off (on an 80-column terminal that hid the whole status line).
        width = self.size.width or None
        first = header_line(view, width, attached=self._attached)
        second = status_line(view, self.elapsed(), width)
        return Content("\n").join([first, second])


def fit(parts: list[Content], width: int | None, *, drop: tuple[int, ...] = ()) -> Content:
    """Join `parts` and fit them in `width` cells: leave out the parts at the indices in
    `drop`, in that order, until the line fits, then cut what is left with an ellipsis.
    A part left empty is skipped."""
    kept = list(parts)

    def line() -> Content:
        return Content("").join([p for p in kept if p])

    for index in drop:
        if width is None or line().cell_length <= width:
            break
        kept[index] = Content("")
    joined = line()
    if width is not None and joined.cell_length > width:
        joined = joined.truncate(width, ellipsis=True)
    return joined


def header_line(view: v.RunView, width: int | None = None, *, attached: str = "") -> Content:
    """What, where, by whom; `attached` names the process that owns the run when this
    app only watches it (--attach): quitting then may leave the run going."""
    device = view.device or "?"
    if view.gpu:
        device = f"{device} {view.gpu}"
    where = [(view.op, "bold"), f" ({view.op_kind})" if view.op_kind != "builtin" else ""]
    where += ["  on ", (device, "bold")]
    if view.runner and view.runner != "local":
        where.append(f" via {view.runner}")
    no_gpu = Content("") if view.speed_measured else Content.styled(NO_GPU, "bold $warning")
    if view.sandbox and view.sandbox.startswith("off"):  # candidates run without walls
        walls = Content.styled(f"sandbox: {view.sandbox}", "bold $warning")
        no_gpu = Content.assemble(no_gpu, "  ", walls) if no_gpu else walls
    proposer = view.proposer + (f"/{view.model}" if view.model else "")
    parts = [
        Content.assemble(("KernelLadder", "bold $primary"), "  "),
        Content.assemble(*where),
        Content.assemble("  ", no_gpu) if no_gpu else no_gpu,
        Content.assemble("  proposer ", (proposer, "bold")),
        Content.assemble("  target ", (fmt.speedup(view.target, unmeasured="none"), "bold")),
    ]
    if attached and view.state != v.RUN_FINISHED:  # before the facts: it changes quitting
        parts.insert(1, Content.assemble((f"attached to {attached}", "bold $accent"), "  "))
        return fit(parts, width, drop=(0, 5, 4))  # then the target, then the proposer
    return fit(parts, width, drop=(0,))  # the name of the app goes first


def status_line(view: v.RunView, elapsed: float | None, width: int | None = None) -> Content:
    """Elapsed time, attempts, best, cost, waiting gates and the run's state, which always
    shows (at the end): when the width is short the floor fraction, the cost and the
    elapsed time are left out, in that order."""
    settings = view.settings or {}
    max_attempts = settings.get("max_attempts")
    time_limit = settings.get("time_limit_s")
    budget_usd = settings.get("budget_usd")
    # attempt numbers handed out, as the budget and the summary count them (a vetoed
    # proposal is one): judged attempts alone read 79/80 on a run finished at 80 of 80
    attempts = f"{view.attempts_used}" + (f"/{max_attempts}" if max_attempts else "")
    time_used = fmt.duration(elapsed) + (f"/{fmt.duration(time_limit)}" if time_limit else "")
    cost = fmt.usd(view.cost_usd) + (f"/{fmt.usd(budget_usd)}" if budget_usd else "")
    budget_tokens = settings.get("budget_tokens")
    used = view.tokens_in + view.tokens_out
    if fmt.tokens_shown(used, budget_tokens):  # an unpriced model is bounded by tokens
        bound = f"/{fmt.tokens(budget_tokens)}" if budget_tokens else ""
        cost += f" · {fmt.tokens(used)}{bound} tok"
    floor = over_reference = Content("")
    if view.best_attempt is None:
        best = Content.styled("none yet", "$text-muted")
    elif view.best_vs_best is not None:
        # the figure of merit first: against the fastest library baseline per shape
        versus = view.best_versus or "best"
        best = Content.assemble(
            (f"#{view.best_attempt} {view.best_vs_best:.2f}x vs {versus}", "bold $success"),
            f" · {view.best_standing}" if view.best_standing else "",
        )
        if view.best_confirmed:
            held = view.best_confirmed.startswith("confirmed")
            style = "$success" if held else "bold $warning"
            best = Content.assemble(best, " · ", (view.best_confirmed, style))
        if view.best_floor_fraction is not None:
            floor = Content(f" · {fmt.percent(view.best_floor_fraction)} floor")
        over_reference = Content.styled(
            f" ({fmt.speedup(view.best_speedup)} over reference)", "$text-muted"
        )
    else:
        shown = (
            f"{fmt.speedup(view.best_speedup)} over reference"
            if view.speed_measured and view.best_speedup is not None
            else "passes (speed not measured)"
            if not view.speed_measured
            else fmt.speedup(view.best_speedup)
        )
        best = Content.styled(f"#{view.best_attempt} {shown}", "bold $success")
        if view.best_floor_fraction is not None:
            floor = Content(f" ({fmt.percent(view.best_floor_fraction)} of floor)")
    state_style = {
        v.RUN_RUNNING: "bold $success",
        v.RUN_PAUSED: "bold $warning",
        v.RUN_STOPPING: "bold $warning",
        v.RUN_RESUMING: "bold $warning",
        v.RUN_FINISHED: "bold $primary",
        v.RUN_LOG_ENDS: "bold $warning",
    }.get(view.state, "bold")
    state = view.finish_detail if view.state == v.RUN_LOG_ENDS else view.state
    if view.state == v.RUN_FINISHED and view.finish_reason:
        state = f"finished: {view.finish_reason}"
    gates = f"  gates {len(view.gates)} waiting" if view.gates else ""
    state_part = Content.assemble("  ", (state, state_style))
    rate = Content("")
    if view.live and elapsed and elapsed >= RATE_AFTER_S and view.attempts_judged:
        # verified attempts per minute of the run so far: where the time goes, live
        rate = Content.styled(f" · {60.0 * view.attempts_judged / elapsed:.1f}/min", "$text-muted")
    parts = [
        Content.assemble("elapsed ", (time_used, "bold"), "  "),
        Content.assemble("attempts ", (attempts, "bold")),
        rate,
        Content.assemble("  best ", best),
        floor,
        over_reference,
        Content.assemble("  cost ", (cost, "bold")),
        Content.styled(gates, "bold $warning"),
    ]
    body_width = None if width is None else max(0, width - state_part.cell_length)
    return Content("").join([fit(parts, body_width, drop=(2, 5, 4, 6, 0)), state_part])
