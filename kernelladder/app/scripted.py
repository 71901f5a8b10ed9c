"""A scripted stand-in for the engine's Run: it plays a list of events at a chosen rate
and answers the RunControl commands by recording their events, like the engine does.

A test double for what a test or a benchmark cannot get from the real engine: an exact,
repeatable event stream (thousands of events a second for the load bench). Like the
engine, it keeps no event objects in memory once published (the log is kept as JSON
lines), so the app under test carries the same memory as with the real engine. It
writes no files unless given a run directory, and then only events.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from kernelladder.engine import events as ev


class ScriptedRun:
    """Plays `script` (events without seq/ts) then waits for a stop, or ends at once when
    `hold_open` is False."""

    def __init__(
        self,
        script: Iterable[ev.Event],
        *,
        rate: float | None = None,
        hold_open: bool = True,
        run_dir: str | Path | None = None,
        clock=time.time,
        chunk: int = 50,
    ) -> None:
        self.script = script  # consumed lazily
        self.rate = rate  # events per second; None: as fast as the loop allows
        self.hold_open = hold_open
        self.run_dir = Path(run_dir) if run_dir else None
        self.clock = clock
        self.chunk = chunk
        self.log_lines: list[str] = []  # every published event, as its JSON line
        self._gates: set[str] = set()  # pending
        self._branch_list: list[str] = []
        self._subscribers: list[asyncio.Queue] = []
        self._stopped: asyncio.Event | None = None
        self._finished = False
        self._branches = 0
        self._file = None

    # --- publishing ------------------------------------------------------------------

    @property
    def log(self) -> list[ev.Event]:
        """Every published event (rebuilt from the JSON lines)."""
        return [ev.event_from_dict(json.loads(line)) for line in self.log_lines]

    @property
    def published(self) -> int:
        return len(self.log_lines)

    def _publish(self, event: ev.Event) -> ev.Event:
        event = replace(event, seq=len(self.log_lines), ts=self.clock())
        line = event.to_json()
        self.log_lines.append(line)
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        for q in self._subscribers:
            q.put_nowait(event)
        if isinstance(event, ev.BranchOpened):
            self._branches += 1
            self._branch_list.append(event.branch_id)
        elif isinstance(event, ev.GateRaised):
            self._gates.add(event.gate_id)
        elif isinstance(event, ev.GateResolved):
            self._gates.discard(event.gate_id)
        return event

    async def subscribe(self, maxsize: int = 10_000) -> AsyncIterator[ev.Event]:
        q: asyncio.Queue = asyncio.Queue()
        for event in self.log:  # a late subscriber gets the history first
            q.put_nowait(event)
        self._subscribers.append(q)
        try:
            while True:
                event = await q.get()
                if event is None:
                    return
                yield event
        finally:
            self._subscribers.remove(q)

    # --- the run ---------------------------------------------------------------------

    async def run(self) -> None:
        self._stopped = asyncio.Event()
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = (self.run_dir / "events.jsonl").open("a", encoding="utf-8")
        try:
            start = time.monotonic()
            for i, event in enumerate(self.script):
                if self._stopped.is_set():
                    break
                self._publish(event)
                if self.rate is not None and (i + 1) % self.chunk == 0:
                    # Keep to the rate in chunks: sleeping per event would be too coarse.
                    due = start + (i + 1) / self.rate
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                elif self.rate is None and (i + 1) % self.chunk == 0:
                    await asyncio.sleep(0)
            if self.hold_open and not self._stopped.is_set():
                await self._stopped.wait()
            if not self._finished:
                self._finish(
                    ev.RULE_ALL_BRANCHES_DONE if not self._stopped.is_set() else ev.RULE_USER_STOP
                )
        finally:
            for q in self._subscribers:
                q.put_nowait(None)
            if self._file is not None:
                self._file.close()
                self._file = None

    def _finish(self, reason: str) -> None:
        self._finished = True
        self._publish(ev.RunFinished(reason=reason))

    # --- RunControl ------------------------------------------------------------------

    def _pending_gates(self) -> set[str]:
        return self._gates

    def _branch_ids(self) -> list[str]:
        return self._branch_list

    def _check_live(self) -> None:
        if self._finished:
            raise ValueError("the run has finished")

    async def prune(self, branch_id: str) -> None:
        self._check_live()
        if branch_id not in self._branch_ids():
            raise ValueError(f"no branch {branch_id}")
        self._publish(ev.BranchPruned(branch_id=branch_id, pruned=(branch_id,)))

    async def edit_hints(self, text: str, branch_id: str | None = None) -> None:
        self._check_live()
        self._publish(ev.HintEdited(text=text, branch_id=branch_id))

    async def approve(self, gate_id: str) -> None:
        self._check_live()
        if gate_id not in self._pending_gates():
            raise ValueError(f"no pending gate {gate_id}")
        self._publish(ev.GateResolved(gate_id=gate_id, decision="approve"))

    async def veto(self, gate_id: str, note: str = "") -> None:
        self._check_live()
        if gate_id not in self._pending_gates():
            raise ValueError(f"no pending gate {gate_id}")
        self._publish(ev.GateResolved(gate_id=gate_id, decision="veto", note=note))

    async def pause(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._publish(ev.RunPaused() if branch_id is None else ev.BranchPaused(branch_id=branch_id))

    async def resume(self, branch_id: str | None = None) -> None:
        self._check_live()
        self._publish(
            ev.RunResumed() if branch_id is None else ev.BranchResumed(branch_id=branch_id)
        )

    async def open_branch(self, from_attempt: int, strategy: str | None = None) -> str:
        self._check_live()
        branch_id = f"b{self._branches + 1}"
        self._publish(
            ev.BranchOpened(
                branch_id=branch_id,
                strategy=strategy or "user-branch",
                from_attempt=from_attempt,
                by="user",
            )
        )
        return branch_id

    async def set_target(self, target: float | None) -> None:
        self._check_live()
        self._publish(ev.TargetChanged(target=target))

    async def stop(self, reason: str = "user") -> None:
        self._check_live()
        self._publish(ev.StopRequested(reason=ev.RULE_USER_STOP))
        if self._stopped is not None:
            self._stopped.set()


# --- scripts ----------------------------------------------------------------------------


def demo_script(
    *,
    attempts: int = 9,
    branches: Sequence[str] = ("rows-per-program", "block-size", "two-pass"),
    speed: bool = True,
    gate_at: int | None = 7,
    progress_lines: int = 3,
) -> list[ev.Event]:
    """A small, plausible run: K branches, attempts judged in turn, one pending gate.
    Speedups (when `speed`) are made up for the UI and never leave tests."""
    out: list[ev.Event] = [
        ev.RunStarted(
            run_id="scripted",
            op="rmsnorm",
            proposer="search",
            device="cuda" if speed else "cpu",
            gpu="scripted GPU" if speed else None,
            target=1.5,
            settings={"max_attempts": 40, "gate_timeout_policy": "veto"},
            speed_measured=speed,
        )
    ]
    ids = [f"b{i + 1}" for i in range(len(branches))]
    for bid, strategy in zip(ids, branches, strict=True):
        out.append(ev.BranchOpened(branch_id=bid, strategy=strategy))
    best: dict[str, float] = {}
    overall: float | None = None
    last: dict[str, int | None] = dict.fromkeys(ids)
    for n in range(1, attempts + 1):
        bid = ids[(n - 1) % len(ids)]
        strategy = branches[(n - 1) % len(ids)]
        parent = last[bid]
        high = gate_at is not None and n == gate_at
        out.append(ev.ProposalRequested(branch_id=bid, parent_attempt=parent))
        out.append(
            ev.ProposalReceived(
                branch_id=bid,
                attempt=n,
                parent_attempt=parent,
                source_hash=f"{n:064x}",
                strategy=strategy,
                move="switch to a split-row two-pass algorithm" if high else f"BLOCK {64 * n}",
                undo_cost="high" if high else "low",
                undo_reason="changes the algorithm family" if high else "a parameter change",
                proposer="search",
            )
        )
        if high:
            out.append(
                ev.GateRaised(
                    gate_id="g1",
                    branch_id=bid,
                    attempt=n,
                    move="switch to a split-row two-pass algorithm",
                    undo_cost="high",
                    reason="changes the algorithm family",
                    policy="ask",
                    timeout_s=None,
                )
            )
            continue
        out.append(ev.AttemptStarted(attempt=n, branch_id=bid, runner="local:0"))
        for i in range(progress_lines):
            gate = ("load", "correctness", "speed")[i % 3]
            out.append(ev.AttemptProgress(attempt=n, gate=gate, message=f"step {i + 1}"))
        failed = n % 4 == 0
        s = None if failed or not speed else round(0.9 + 0.07 * n + 0.05 * (n % 3), 3)
        out.append(
            ev.VerdictReady(
                attempt=n,
                branch_id=bid,
                verdict="fail" if failed else "pass",
                verdict_kind="fail" if failed else "pass",
                gate="correctness" if failed else None,
                speedup=s,
                floor_fraction=None if s is None else round(min(0.99, 0.5 + 0.04 * n), 3),
                noise=None if s is None else 0.02,
                summary="max error 3e-2 at (3, 17)" if failed else "passed",
                elapsed_s=1.0,
            )
        )
        if not failed:
            last[bid] = n
            if s is None or s > best.get(bid, 0.0):
                previous = best.get(bid)
                best[bid] = s if s is not None else 0.0
                is_overall = s is not None and (overall is None or s > overall)
                if s is None and overall is None and n == 1:
                    is_overall = True
                if is_overall:
                    overall = s
                out.append(
                    ev.BestImproved(
                        attempt=n, branch_id=bid, speedup=s, previous=previous, overall=is_overall
                    )
                )
    return out


def load_script(total: int, *, attempts: int = 50, branches: int = 3) -> Iterator[ev.Event]:
    """`total` events, nearly all attempt log lines spread over `attempts` attempts: the
    shape of a busy run, for the load bench. A generator: nothing is held in memory."""
    yield ev.RunStarted(run_id="load", op="rmsnorm", proposer="search", device="cpu")
    ids = [f"b{i + 1}" for i in range(branches)]
    for i, bid in enumerate(ids):
        yield ev.BranchOpened(branch_id=bid, strategy=f"strategy-{i + 1}")
    made = 1 + branches
    per_attempt = max(1, (total - made) // attempts)
    n = 0
    while made < total:
        made += 1
        if n == 0 or (made - 2) % per_attempt == 0:
            n += 1
            bid = ids[n % branches]
            yield (
                ev.ProposalReceived(
                    branch_id=bid,
                    attempt=n,
                    parent_attempt=None,
                    source_hash="0" * 64,
                    strategy="load",
                    move=f"move {n}",
                    undo_cost="low",
                    undo_reason="load",
                    proposer="search",
                )
            )
            continue
        yield ev.AttemptProgress(attempt=n, gate="speed", message=f"line {made}")


# --- load measurement (bench/tui_load.py and tests/app/test_tui_load.py) -----------------------


async def measure_load(
    *,
    rate: float = 5_000,
    seconds: float = 10.0,
    press_every: float = 0.1,
    size: tuple[int, int] = (160, 48),
) -> dict:
    """Runs the app on a ScriptedRun emitting `rate` events/s for `seconds`, pressing a
    key every `press_every` s and timing how long the app takes to act on it. Returns
    the latencies (ms) and whether every event reached the fold."""
    from textual import events as tevents

    from kernelladder.app.app import KernelLadderApp
    from kernelladder.app.widgets.attempt_panel import AttemptPanel

    total = int(rate * seconds)
    run = ScriptedRun(load_script(total), rate=rate, hold_open=False)
    app = KernelLadderApp(run=run, frozen=True)
    latencies: list[float] = []
    tabs = ("tab-verdict", "tab-log")
    async with app.run_test(size=size) as pilot:
        panel = app.main.query_one(AttemptPanel)
        start = time.monotonic()
        i = 0
        while not app.run_over and time.monotonic() - start < seconds * 3 + 10:
            want = tabs[i % 2]
            key = "2" if want == "tab-verdict" else "1"
            sent = time.perf_counter()
            app.post_message(tevents.Key(key, key))
            while panel.active != want:
                await asyncio.sleep(0.001)
                if time.perf_counter() - sent > 5:
                    break
            latencies.append((time.perf_counter() - sent) * 1000)
            i += 1
            await asyncio.sleep(press_every)
        await pilot.pause(0.2)
        bridge = app.bridge
        result = {
            "events_emitted": run.published,
            "events_folded": app.fold.folded,
            "events_pumped": bridge.events_pumped if bridge else 0,
            "batches": bridge.batches_delivered if bridge else 0,
            "largest_batch": bridge.largest_batch if bridge else 0,
            "latencies_ms": latencies,
            "wall_s": time.monotonic() - start,
        }
    return result


def percentiles(values: Sequence[float], points=(50, 90, 95, 99, 100)) -> dict[int, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {p: ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] for p in points}
