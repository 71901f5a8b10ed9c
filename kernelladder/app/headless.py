"""The headless view of a run: a rich live panel on a terminal, plain progress lines
otherwise. It follows the engine only through its event stream and folds the events
itself with the engine's fold, exactly as the TUI does (no textual here).

`--gate ask` without the TUI: the view asks on the terminal (approve / veto) and sends
the answer through the run's steering API.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kernelladder.app.format import duration, standing_summary
from kernelladder.engine import RunState, apply, new_state
from kernelladder.engine import events as ev

REFRESH_HZ = 4
RECENT_ATTEMPTS = 8

_STATUS_STYLE = {
    "running": "green",
    "paused": "yellow",
    "waiting-gate": "magenta",
    "exhausted": "dim",
    "pruned": "dim red",
    "stopped": "dim",
}


def _speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}x"


def _pass_text(summary: str) -> str:
    return summary if summary.startswith("passed") else f"pass: {summary}"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def run_status(state: RunState) -> str:
    if state.finished:
        return f"finished: {state.finish_reason}"
    if state.stopping:
        return "stopping"
    if state.paused:
        return "paused"
    return "running" if state.started_ts is not None else "starting"


def _tokens_part(state: RunState) -> str:
    """ "  tokens 7,400/50,000" beside the cost, once a model spent some or a budget
    bounds them (an unpriced model's cost stays $0.00)."""
    used = state.tokens_in + state.tokens_out
    budget = state.setting("budget_tokens")
    if not (used or budget):
        return ""
    return f"  tokens {used:,}" + (f"/{budget:,}" if budget else "")


def spent_text(state: RunState) -> str:
    """What the run's model calls cost, for its last line: "tokens 7,400, cost $0.00"
    ("" when no model was asked)."""
    used = state.tokens_in + state.tokens_out
    if not (used or state.cost_usd):
        return ""
    return f"tokens {used:,} ({state.tokens_in:,} in, {state.tokens_out:,} out), cost ${state.cost_usd:.2f}"


def render_state(
    state: RunState, *, now: float | None = None, notices_from: int = 0, recorded: bool = False
) -> Group:
    """The whole panel for one state (also used by `kernelladder replay`); only notices
    logged at or after seq `notices_from` (a resumed session's own) are shown; `recorded`
    (a replay) says each notice's time into the run: it was said then, not now."""
    speed_note = "" if state.speed_measured else "  [yellow]speed not measured (no GPU)[/]"
    if state.sandbox and state.sandbox.startswith("off"):  # candidates run without walls
        speed_note += f"  [yellow]sandbox: {escape(state.sandbox)}[/]"
    header = Text.from_markup(
        f"[bold]{state.op}[/] on {state.device}{' (' + state.gpu + ')' if state.gpu else ''}"
        f"  proposer [bold]{state.proposer}[/]{' ' + state.model if state.model else ''}"
        f"  target {_speed(state.target) if state.target else '-'}{speed_note}\n"
        f"{run_status(state)}  elapsed {_clock(state.elapsed_at(now))}"
        f"  attempts {state.attempts_used}/{state.setting('max_attempts', '-')}"
        f"  passed {state.passed}  best {_best_in_header(state)}"
        f"  cost ${state.cost_usd:.2f}{_tokens_part(state)}"
    )
    branches = Table(title="branches", expand=True, title_justify="left")
    for col in ("id", "strategy", "status", "attempts", "passed", "best"):
        branches.add_column(col)
    for b in state.branches.values():
        status = b.status + (f" ({b.rule})" if b.rule else "")
        mine = state.attempts.get(b.best_attempt) if b.best_attempt is not None else None
        if mine is not None and mine.vs_best is not None:  # the standing first
            best = f"#{b.best_attempt} {mine.vs_best:.2f}x vs best"
        elif b.best_speedup is not None:
            best = f"{_speed(b.best_speedup)} over ref"
        else:
            best = f"#{b.best_attempt}" if b.best_attempt else "-"
        branches.add_row(
            b.id, state.branch_label(b.id), Text(status, style=_STATUS_STYLE.get(b.status, "")),
            str(len(b.attempts)), str(b.passes), best,
        )  # fmt: skip
    recent = Table(title="recent attempts", expand=True, title_justify="left")
    recent.add_column("#", no_wrap=True, min_width=3, justify="right")
    recent.add_column("branch", no_wrap=True, min_width=6)
    recent.add_column("move", ratio=2, overflow="ellipsis", no_wrap=True)
    recent.add_column("undo", no_wrap=True, min_width=6)
    recent.add_column("result", ratio=3, overflow="ellipsis", no_wrap=True)
    for n in sorted(state.attempts)[-RECENT_ATTEMPTS:]:
        a = state.attempts[n]
        if a.verdict == "pass":
            result = Text(_pass_text(standing_summary(a)), style="green")
        elif a.verdict is not None:
            result = Text(f"{a.failed_gate or a.verdict_kind}: {a.summary}", style="red")
        else:
            gate = state.progress[n][1] if n in state.progress else ""
            result = Text(a.status + (f" {gate}" if a.status == "running" else ""))
        recent.add_row(str(n), a.branch_id, a.move, a.undo_cost, result)
    parts: list[Any] = [header, branches, recent]
    for gid in state.pending_gates:
        g = state.gates[gid]
        parts.append(
            Text.from_markup(
                f"[magenta]gate {gid}[/] {g.branch_id} #{g.attempt}: {g.move} "
                f"({g.undo_cost}: {g.reason})"
            )
        )
    for line in deploy_lines(state):
        parts.append(Text(line, style="green" if "the patched model matches" in line else "yellow"))
    for notice in [n for n in state.notices if n.seq >= notices_from][-3:]:
        style = {"error": "red", "warning": "yellow"}.get(notice.level, "")
        label = notice.level
        if recorded and state.started_ts is not None:
            label += f" (recorded at {duration(notice.ts - state.started_ts)})"
        parts.append(Text(f"{label}: {notice.message}", style=style))
    return Group(*parts)


def deploy_lines(state: RunState) -> list[str]:
    """The last deploy of each attempt into each model, one line each."""
    latest: dict[tuple, dict] = {}
    for d in state.deploys:
        latest[(d["attempt"], d["model"])] = d
    return [f"deploy (event #{d['seq']}): {d['summary']}" for d in latest.values()]


def _started_line(e: ev.RunStarted) -> str:
    speed = "" if e.speed_measured else " (speed not measured: no GPU)"
    return f"run {e.run_id}: {e.op} on {e.device}{speed}, proposer {e.proposer}"


def _verdict_line(e: ev.VerdictReady) -> str:
    if e.verdict == "pass":
        return f"#{e.attempt} {e.branch_id} {_pass_text(standing_summary(e))}"
    return f"#{e.attempt} {e.branch_id} FAIL at {e.gate or e.verdict_kind}: {e.summary}"


def _best_line(e: ev.BestImproved) -> str | None:
    """Only a best of the whole run is worth a line (a branch's own best is not)."""
    if not e.overall:
        return None
    if e.vs_best is None:
        return f"best: #{e.attempt} ({_speed(e.speedup) if e.speedup else 'first pass'})"
    over = f", {_speed(e.speedup)} over reference" if e.speedup else ""
    return f"best: #{e.attempt} ({e.vs_best:.2f}x vs best{over})"


def _confirmed_line(e: ev.BestConfirmed) -> str:
    figure = f"vs best {e.vs_best:.3f}x, " if e.vs_best is not None else ""
    held = "confirmed" if e.held else f"did not hold ({e.detail})"
    return f"#{e.attempt} re-measured: {figure}up to {e.rounds} rounds per shape; {held}"


def _finished_line(e: ev.RunFinished, state: RunState) -> str:
    from kernelladder.app.verdict_report import best_text

    standing = best_text(state, floor=False) if state.best_attempt == e.best_attempt else None
    best = _best(e.best_attempt, e.best_speedup, "no attempt passed")
    if standing is not None:
        best = f"best {standing}"
    elif e.best_vs_best is not None:
        best += f" ({e.best_vs_best:.2f}x vs best)"
    spent = spent_text(state)
    return f"finished: {e.reason}{' (' + e.detail + ')' if e.detail else ''}; {best}" + (
        f"; {spent}" if spent else ""
    )


# The plain progress line of each event worth one, from the event alone (RunReopened and
# RunFinished also read the state: event_line says them).
_LINES: dict[type[ev.Event], Callable[[Any], str | None]] = {
    ev.RunStarted: _started_line,
    ev.BranchOpened: lambda e: (
        f"{e.branch_id} opened: {e.strategy}"
        + (f" from #{e.from_attempt}" if e.from_attempt is not None else "")
    ),
    ev.ProposalReceived: lambda e: f"#{e.attempt} {e.branch_id} proposed: {e.move} [{e.undo_cost}]",
    ev.VerdictReady: _verdict_line,
    ev.BestImproved: _best_line,
    ev.BestConfirmed: _confirmed_line,
    ev.GateRaised: lambda e: (
        f"gate {e.gate_id}: #{e.attempt} {e.move} is {e.undo_cost}: {e.reason}"
    ),
    ev.GateResolved: lambda e: (
        f"gate {e.gate_id}: {e.decision} ({e.by}{': ' + e.note if e.note else ''})"
    ),
    ev.BranchExhausted: lambda e: f"{e.branch_id} done: {e.rule} ({e.detail})",
    ev.BranchPruned: lambda e: f"pruned {', '.join(e.pruned or (e.branch_id,))}",
    ev.AttemptRetried: lambda e: f"#{e.attempt} retried: {e.reason}",
    ev.AttemptCancelled: lambda e: f"#{e.attempt} cancelled: {e.reason}",
    ev.Notice: lambda e: f"{e.level}: {e.message}",
    ev.DeployChecked: lambda e: f"deploy: {e.summary}",
    ev.StopRequested: lambda e: (
        f"stopping ({e.reason}{', cancelling in-flight attempts' if e.cancel else ''})"
    ),
}


def event_line(event: ev.Event, state: RunState) -> str | None:
    """One plain progress line for an event worth a line (None for the rest)."""
    if isinstance(event, ev.RunReopened):
        return resume_line(event, state)
    if isinstance(event, ev.RunFinished):
        return _finished_line(event, state)
    said = _LINES.get(type(event))
    return said(event) if said else None


def _best_in_header(state: RunState) -> str:
    """The best by standing where the log records it ("#22 1.07x vs torch.compile · 3
    faster 2 tie · 103% floor · confirmed (8.14x over reference)"), else as older runs
    showed it."""
    from kernelladder.app.verdict_report import best_text

    text = best_text(state)
    if text is None:
        tail = f" (#{state.best_attempt})" if state.best_attempt else ""
        over = " over reference" if state.best_speedup is not None else ""
        return f"{_speed(state.best_speedup)}{over}{tail}"
    return text


def _best(attempt: int | None, speedup: float | None, none: str) -> str:
    if attempt is None:
        return none
    if speedup is None:
        return f"best #{attempt} (speed not measured)"
    return f"best #{attempt} {_speed(speedup)} over reference"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def resume_line(event: ev.RunReopened, state: RunState, where: str | None = None) -> str:
    """One line saying what a resume picks up, from the fold's state at RunReopened."""
    best = _best(state.best_attempt, state.best_speedup, "no attempt passed yet")
    parts = [
        f"resumed {where or 'run ' + state.run_id}: {_count(state.attempts_used, 'attempt')} "
        f"so far, {state.passed} passed, {best}"
    ]
    if event.requeued_attempts:
        parts.append("re-running " + ", ".join(f"#{n}" for n in event.requeued_attempts))
    if state.pending_gates:
        parts.append(f"{_count(len(state.pending_gates), 'gate')} pending")
    if event.settings:
        parts.append("now " + ", ".join(f"{k} {v}" for k, v in sorted(event.settings.items())))
    if event.repaired_tail:
        parts.append("a torn last log line was dropped")
    return "; ".join(parts)


class TerminalGatePrompt:
    """Asks on the terminal for `--gate ask` gates, one at a time (stdin must be a TTY).
    `open` is true while a question waits for its answer on the line."""

    def __init__(self, run: Any, console: Console, stdin: IO[str] | None = None) -> None:
        self.run = run
        self.console = console
        self.stdin = stdin or sys.stdin
        self._buffer = b""
        self.open = False

    async def ask(self, gate: ev.GateRaised) -> None:
        self.console.print(
            f"[magenta]gate {gate.gate_id}[/] branch {gate.branch_id}, attempt #{gate.attempt}: "
            f"{gate.move}\n  undo cost {gate.undo_cost}: {gate.reason}"
        )
        while True:
            self.console.print("  approve or veto? \\[a/v] ", end="")
            self.open = True
            try:
                line = await self._readline()
            finally:
                self.open = False
            if line is None:
                return  # stdin closed: leave the gate to its timeout or a stop
            answer = line.strip().lower()
            if gate.gate_id not in self.run.state.pending_gates:
                return  # resolved meanwhile (timeout, prune)
            try:
                if answer in ("a", "approve", "y", "yes"):
                    await self.run.approve(gate.gate_id)
                    return
                if answer in ("v", "veto", "n", "no"):
                    await self.run.veto(gate.gate_id, note="vetoed on the terminal")
                    return
            except ValueError:
                return

    async def _readline(self) -> str | None:
        """One line from stdin without blocking the event loop (our own buffer: a
        buffered file object would hide lines the loop's reader cannot see)."""
        if b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            return line.decode(errors="replace")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str | None] = loop.create_future()
        fd = self.stdin.fileno()

        def readable() -> None:
            if fut.done():
                return
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                fut.set_result(None)
                return
            self._buffer += data
            if b"\n" in self._buffer:
                line, _, self._buffer = self._buffer.partition(b"\n")
                fut.set_result(line.decode(errors="replace"))

        loop.add_reader(fd, readable)
        try:
            return await fut
        finally:
            loop.remove_reader(fd)


class HeadlessView:
    """Follows a run's events until it finishes: a rich Live panel when `live`, plain
    lines otherwise. `prompt` answers ask-gates on the terminal when given.

    A resumed run's earlier sessions are folded quietly: one line says what is resumed,
    then only this session's events are printed (the live panel shows the whole state,
    but only this session's notices)."""

    def __init__(
        self,
        run: Any,
        *,
        stream: IO[str] | None = None,
        live: bool | None = None,
        prompt_gates: bool = False,
        stdin: IO[str] | None = None,
    ) -> None:
        self.run = run
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.console = Console(file=self.stream, force_terminal=self.live or None, highlight=False)
        self.state = new_state()
        self.prompt = TerminalGatePrompt(run, self.console, stdin) if prompt_gates else None
        self._gates: asyncio.Queue[ev.GateRaised] = asyncio.Queue()
        self._asking: asyncio.Future[None] | None = None
        self._question: tuple[str, asyncio.Future[None]] | None = None  # (gate, its question)
        self._live_display: Live | None = None
        # events below this seq are earlier sessions' (Run.session_start_seq; 0: a new run)
        self.session_start = int(getattr(run, "session_start_seq", 0) or 0)

    def _session_line(self, event: ev.Event) -> str | None:
        """This session's line for an event (None for earlier sessions' events)."""
        if event.seq < self.session_start:
            return None
        if isinstance(event, ev.RunReopened):
            return resume_line(event, self.state, where=str(getattr(self.run, "run_dir", "")))
        return event_line(event, self.state)

    async def follow(self) -> RunState:
        sub = self.run.subscribe()
        if self.live:
            await self._follow_live(sub)
        else:
            async for event in sub:
                apply(self.state, event)
                self._settle_question(event)
                line = self._session_line(event)
                if line:
                    print(line, file=self.stream, flush=True)
                self._maybe_queue_gate(event)
                self._answer_gates(event)
        await self._end_questions()
        return self.state

    def _settle_question(self, event: ev.Event) -> None:
        """The question on the terminal ends when its gate is decided elsewhere (an
        attached app, a timeout, a prune) or the run ends: its line is closed first, so
        what comes next (the decision, the `finished:` line) stands on its own."""
        if self._question is None:
            return
        gate_id, question = self._question
        decided = isinstance(event, ev.GateResolved) and event.gate_id == gate_id
        if not (decided or isinstance(event, ev.RunFinished)) or question.done():
            return
        if self.prompt is not None and self.prompt.open:
            self.console.print()
        question.cancel()
        if self.live and decided:  # the panel is down while a question is open: say it here
            line = self._session_line(event)
            if line:
                self.console.print(line)

    async def _end_questions(self) -> None:
        """The run ended: a question still open is withdrawn (and the live panel back up)
        before the last state is drawn."""
        asking = self._asking
        if asking is not None:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)

    def _maybe_queue_gate(self, event: ev.Event) -> None:
        if self.prompt and isinstance(event, ev.GateRaised) and event.policy == "ask":
            self._gates.put_nowait(event)

    def _answer_gates(self, event: ev.Event) -> None:
        # answered in a task so the event stream keeps flowing while a person thinks; a
        # gate left pending by an earlier session waits until this session has started
        if self.prompt is None or self._gates.empty() or self._asking is not None:
            return
        if event.seq < self.session_start:
            return
        self._asking = asyncio.ensure_future(self._drain_gates())

    async def _drain_gates(self) -> None:
        try:
            while not self._gates.empty():
                gate = self._gates.get_nowait()
                if gate.gate_id in self.run.state.pending_gates:
                    if self._live_display is not None:
                        self._live_display.stop()
                    question = asyncio.ensure_future(self.prompt.ask(gate))  # type: ignore[union-attr]
                    self._question = (gate.gate_id, question)
                    try:
                        await asyncio.wait({question})  # answered here, or settled elsewhere
                    finally:
                        self._question = None
                        question.cancel()
                        if self._live_display is not None:
                            self._live_display.start()
        finally:
            self._asking = None

    async def _follow_live(self, sub: Any) -> None:
        done = asyncio.Event()

        async def consume() -> None:
            async for event in sub:
                apply(self.state, event)
                self._settle_question(event)
                if isinstance(event, ev.RunReopened):
                    line = self._session_line(event)
                    if line:
                        self.console.print(line)  # above the live panel, once
                self._maybe_queue_gate(event)
                self._answer_gates(event)
            done.set()

        consumer = asyncio.ensure_future(consume())
        with Live(
            render_state(self.state, notices_from=self.session_start),
            console=self.console,
            auto_refresh=False,
            transient=False,
        ) as live:
            self._live_display = live
            try:
                while not done.is_set():
                    panel = render_state(
                        self.state, now=time.time(), notices_from=self.session_start
                    )
                    live.update(panel, refresh=True)
                    try:
                        await asyncio.wait_for(done.wait(), 1 / REFRESH_HZ)
                    except TimeoutError:
                        pass
                await self._end_questions()  # the panel is up again for its last frame
                live.update(render_state(self.state, notices_from=self.session_start), refresh=True)
            finally:
                self._live_display = None
        await consumer
