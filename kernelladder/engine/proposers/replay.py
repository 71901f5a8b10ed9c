"""`replay`: re-proposes the candidate sources of a saved run, to verify them again on
another machine. Reads RUN_DIR/events.jsonl itself (a torn last line is skipped) and
RUN_DIR/attempts/<n>.py; each branch label gets that label's proposals in attempt order.
With fewer branches than the saved run had, the extra labels' proposals are folded into
the opened ones (label i into label i mod k, merged in attempt order), so every saved
source is still proposed; left_over() names those a run ended without proposing.
A resumed run goes on where it stopped: resumed() drops from the queues the sources its
log already holds a proposal of (by source hash, per label, one saved copy per proposal).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerError,
    ProposerExhausted,
)
from kernelladder.engine.record.log import sha256_text

NAME = "replay"


@dataclass(frozen=True)
class SavedProposal:
    attempt: int
    branch_id: str
    strategy: str
    move: str
    undo_cost: str
    undo_reason: str
    model: str | None
    source_hash: str
    parent_attempt: int | None = None  # the saved attempt it was made from
    family: str | None = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a log, in order. A last line that is not a JSON object is a torn
    tail (a killed run) and is skipped; such a line anywhere else means the log was
    damaged: ValueError naming the file and line, as `kernelladder replay` says it."""
    data = path.read_bytes()
    events = []
    pos = 0
    for number, line in enumerate(data.split(b"\n"), 1):
        start, pos = pos, pos + len(line) + 1
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError(f"expected a JSON object, got {type(event).__name__}")
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError too
            if not data[pos:].strip():
                break  # the torn last line
            why = " ".join(str(exc).split())
            raise ValueError(f"{path}: corrupt line {number} (byte {start}): {why}") from None
        events.append(event)
    return events


class ReplayProposer(ProposerBase):
    name = NAME
    replays_recorded_undo = True  # the saved run's final rating, its gates asked again

    def __init__(self, *, run_dir: str | None = None, replay_from: str | None = None, **_: Any):
        where = run_dir or replay_from
        if not where:
            raise ValueError("the replay proposer needs the saved run's directory (run_dir)")
        self.run_dir = Path(where)
        log = self.run_dir / "events.jsonl"
        if not log.is_file():
            raise ValueError(f"no saved run at {self.run_dir}: {log} not found")
        try:
            events = read_events(log)
        except OSError as exc:
            raise ValueError(f"cannot read {log}: {exc.strerror or exc}") from None
        started = next((e for e in events if e.get("kind") == "run_started"), {})
        self.saved_op = str(started.get("op") or "")  # "" when the log does not say
        self.labels: list[str] = []
        self._by_label: dict[str, list[SavedProposal]] = {}  # per saved label, attempt order
        for e in events:
            if e.get("kind") == "branch_opened" and e.get("strategy"):
                self._label(str(e["strategy"]))
        saved = [_saved(e) for e in events if e.get("kind") == "proposal_received"]
        for p in sorted((p for p in saved if p is not None), key=lambda p: p.attempt):
            self._label(p.strategy).append(p)
        self._queues: dict[str, deque[SavedProposal]] = {
            label: deque(ps) for label, ps in self._by_label.items()
        }
        self._replayed: dict[int, int] = {}  # saved attempt -> this run's attempt

    def _label(self, label: str) -> list[SavedProposal]:
        if label not in self._by_label:
            self._by_label[label] = []
            self.labels.append(label)
        return self._by_label[label]

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        """The saved labels (those with proposals), in the order they were opened, at
        most k of them: with fewer branches, label i's proposals go to label i mod k.
        A saved run of another op is refused: none of its sources would load."""
        name = str(op.get("name") or "")
        if self.saved_op and name and name != self.saved_op:
            raise ProposerError(
                f"{self.run_dir} is a run of {self.saved_op}, not {name}: "
                f"replay it with `optimize {self.saved_op} --replay-from {self.run_dir}`",
                fatal=True,
            )
        filled = [label for label in self.labels if self._by_label[label]]
        if not filled:
            return list(self.labels)
        opened = filled[: max(1, k)]
        merged: dict[str, list[SavedProposal]] = {label: [] for label in opened}
        for i, label in enumerate(filled):
            merged[opened[i % len(opened)]].extend(self._by_label[label])
        # called again (prepare, then start) before any proposal: rebuilt, never doubled
        self._queues = {
            label: deque(sorted(ps, key=lambda p: p.attempt)) for label, ps in merged.items()
        }
        return opened

    def resumed(self, op: dict[str, Any], k: int, proposed: Iterable[tuple[str, str]]) -> None:
        """A resumed run of k branches: the queues as strategies(op, k) built them, less
        what it already proposed, as (branch label, source hash) pairs. Each pair takes
        the first queued source of that label with that hash: a source saved twice and
        proposed once is proposed once more."""
        self.strategies(op, k)
        for label, digest in proposed:
            queue = self._queues.get(label)
            match = next((p for p in queue or () if self._hash(p) == digest), None)
            if match is not None:
                queue.remove(match)

    def _hash(self, saved: SavedProposal) -> str:
        """The saved source's hash; read from its file for a log that did not record it."""
        if saved.source_hash:
            return saved.source_hash
        try:
            source = (self.run_dir / "attempts" / f"{saved.attempt}.py").read_text(encoding="utf-8")
        except (OSError, ValueError):  # unreadable: propose() says so when its turn comes
            return ""
        return sha256_text(source)

    def remaining(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def left_over(self) -> str | None:
        """One line naming the saved sources not proposed yet (the run ends with them
        unverified: a budget, a stop or a branch rule came first); None when all were."""
        left = sorted(p.attempt for q in self._queues.values() for p in q)
        if not left:
            return None
        shown = ", ".join(f"#{n}" for n in left[:12]) + (", ..." if len(left) > 12 else "")
        return (
            f"replay: {len(left)} saved source(s) of {self.run_dir} were not re-verified ({shown})"
        )

    async def propose(self, ctx: ProposalContext) -> Proposal:
        queue = self._queues.get(ctx.strategy)
        if not queue:
            raise ProposerExhausted(f"replay: no saved proposal left for {ctx.strategy!r}")
        saved = queue.popleft()
        path = self.run_dir / "attempts" / f"{saved.attempt}.py"
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProposerError(
                f"replay: cannot read {path}: {exc.strerror or exc}", retryable=False
            ) from None
        digest = sha256_text(source)
        if saved.source_hash and digest != saved.source_hash:
            raise ProposerError(
                f"replay: {path} does not match the hash the log recorded", retryable=False
            )
        was = f" ({saved.strategy})" if saved.strategy != ctx.strategy else ""
        for entry in ctx.history:  # what this run numbered the saved attempts it replayed
            replayed = (entry.get("meta") or {}).get("replayed_attempt")
            if isinstance(replayed, int) and isinstance(entry.get("attempt"), int):
                self._replayed[replayed] = entry["attempt"]
        return Proposal(
            source=source,
            strategy=ctx.strategy,
            move=f"replay of #{saved.attempt}{was}: {saved.move}",
            undo_cost=saved.undo_cost,
            undo_reason=saved.undo_reason,
            model=saved.model,
            meta={
                "replayed_attempt": saved.attempt,
                "replayed_branch": saved.branch_id,
                **({"family": saved.family} if saved.family else {}),
            },
            base_attempt=self._base(saved, ctx),
        )

    def _base(self, saved: SavedProposal, ctx: ProposalContext) -> int | None:
        """This run's replay of the saved attempt the source was made from: the saved
        lineage, renumbered; the start for a saved first attempt; the shown parent when the
        saved parent was not replayed (yet) in this run."""
        if saved.parent_attempt is None:
            return None
        return self._replayed.get(saved.parent_attempt, ctx.parent_attempt)


def _saved(e: dict[str, Any]) -> SavedProposal | None:
    try:
        attempt = int(e["attempt"])
    except (KeyError, TypeError, ValueError):
        return None
    return SavedProposal(
        attempt=attempt,
        branch_id=str(e.get("branch_id", "")),
        strategy=str(e.get("strategy") or "replay"),
        move=str(e.get("move") or ""),
        undo_cost=str(e.get("undo_cost") or "low"),
        undo_reason=str(e.get("undo_reason") or "replayed from a saved run"),
        model=e.get("model"),
        source_hash=str(e.get("source_hash") or ""),
        parent_attempt=_int_or_none(e.get("parent_attempt")),
        family=str(e["family"]) if e.get("family") else None,
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
