"""A scripted stand-in for the engine's Run: it plays a list of events at a chosen rate
and answers the RunControl commands by recording their events, like the engine does.

A test double for what a test or a benchmark cannot get from the real engine: an exact,
repeatable event stream (thousands of events a second for the load bench). It writes
no files unless given a run directory, and then only events.jsonl.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
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
        self.script = list(script)
        self.rate = rate  # events per second; None: as fast as the loop allows
        self.hold_open = hold_open
        self.run_dir = Path(run_dir) if run_dir else None
        self.clock = clock
        self.chunk = chunk
        self.log: list[ev.Event] = []
        self._subscribers: list[asyncio.Queue] = []
        self._stopped: asyncio.Event | None = None
        self._finished = False
        self._branches = 0
        self._file = None

    # --- publishing ------------------------------------------------------------------

    def _publish(self, event: ev.Event) -> ev.Event:
        event = replace(event, seq=len(self.log), ts=self.clock())
        self.log.append(event)
        if self._file is not None:
            self._file.write(event.to_json() + "\n")
            self._file.flush()
        for q in self._subscribers:
            q.put_nowait(event)
        if isinstance(event, ev.BranchOpened):
            self._branches += 1
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
        raised = {e.gate_id for e in self.log if isinstance(e, ev.GateRaised)}
        resolved = {e.gate_id for e in self.log if isinstance(e, ev.GateResolved)}
        return raised - resolved

    def _branch_ids(self) -> list[str]:
        return [e.branch_id for e in self.log if isinstance(e, ev.BranchOpened)]

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


def load_script(total: int, *, attempts: int = 50, branches: int = 3) -> list[ev.Event]:
    """`total` events, nearly all attempt log lines spread over `attempts` attempts: the
    shape of a busy run, for the load bench."""
    out: list[ev.Event] = [
        ev.RunStarted(run_id="load", op="rmsnorm", proposer="search", device="cpu")
    ]
    ids = [f"b{i + 1}" for i in range(branches)]
    for i, bid in enumerate(ids):
        out.append(ev.BranchOpened(branch_id=bid, strategy=f"strategy-{i + 1}"))
    per_attempt = max(1, (total - len(out)) // attempts)
    n = 0
    while len(out) < total:
        if n == 0 or (len(out) - 1) % per_attempt == 0:
            n += 1
            bid = ids[n % branches]
            out.append(
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
        out.append(ev.AttemptProgress(attempt=n, gate="speed", message=f"line {len(out)}"))
    return out[:total]
