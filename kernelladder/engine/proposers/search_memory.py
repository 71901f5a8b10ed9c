"""What the built-in search remembers (search.py): each grid point a branch proposed and
what the verifier said of it (Trial, BranchMemory), what the whole run proposed
(RunMemory: no point twice in a run, on any branch, a resumed run's sources included),
and how a proposal's context is folded into a branch's memory (ingest)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.protocols import ProposalContext
from kernelladder.engine.record.log import sha256_text
from kernelladder.engine.record.state_model import AttemptStatus
from kernelladder.ops.family import Family, config_key

PASS, FAIL, PENDING = "pass", "fail", "pending"  # a trial: its verdict, or none yet
VETOED = AttemptStatus.VETOED


@dataclass
class Trial:
    """One grid point proposed on a branch, and what became of it (the search's memory)."""

    key: str
    family: str
    params: dict[str, Any]
    order: int
    status: str = PENDING
    attempt: int | None = None
    speedup: float | None = None
    floor_fraction: float | None = None
    gate: str | None = None
    detail: str = ""
    timings: list[dict[str, Any]] = field(default_factory=list)
    base_key: str | None = None
    moved: tuple[tuple[str, int], ...] = ()  # (parameter, +1/-1 grid step) against the base
    move: str = ""


@dataclass
class BranchMemory:
    trials: dict[str, Trial] = field(default_factory=dict)
    family: str | None = None
    dead_moves: set[str] = field(default_factory=set)
    low_occupancy: bool = False  # the parent's profile: resource-hungry parameters down first

    def add(self, trial: Trial) -> Trial:
        self.trials.setdefault(trial.key, trial)
        return self.trials[trial.key]

    def next_order(self) -> int:
        return len(self.trials)


@dataclass
class RunMemory:
    """What the whole run proposed: every branch's memory, and the sources a resumed run
    had proposed before this proposer was made (their sha256, as the log keeps them)."""

    branches: dict[str, BranchMemory] = field(default_factory=dict)
    resumed_hashes: frozenset[str] = frozenset()

    def tried(self, op: str, family: Family, point: Mapping[str, Any]) -> bool:
        key = config_key(op, family.name, point)
        if any(key in m.trials for m in self.branches.values()):
            return True
        if not self.resumed_hashes:
            return False
        return sha256_text(family.render(point)) in self.resumed_hashes

    def family_trials(self, family: str, but: BranchMemory) -> list[Trial]:
        """Trials of `family` on the other branches, each point once (a judged one first),
        in attempt order."""
        found: dict[str, Trial] = {}
        for m in self.branches.values():
            if m is but:
                continue
            for t in m.trials.values():
                if t.family != family:
                    continue
                held = found.get(t.key)
                if held is None or (held.status == PENDING and t.status != PENDING):
                    found[t.key] = t
        return sorted(found.values(), key=lambda t: (t.attempt is None, t.attempt or 0))


# --- reading the context -------------------------------------------------------------------


def _verdict_fields(verdict: Any) -> dict[str, Any]:
    """status/speedup/floor_fraction/gate/detail/timings from a Verdict dict or a summary."""
    if isinstance(verdict, str):
        return {"status": PASS if verdict == PASS else FAIL}
    if not isinstance(verdict, Mapping):
        return {}
    status = verdict.get("verdict")
    out: dict[str, Any] = {}
    if status in (PASS, FAIL):
        out["status"] = status
    for name in ("speedup", "floor_fraction", "gate"):
        if verdict.get(name) is not None:
            out[name] = verdict[name]
    gate = verdict.get("gate")
    gates = verdict.get("gates") or {}
    if gate and isinstance(gates.get(gate), Mapping):
        out["detail"] = str(gates[gate].get("detail") or "")
    if verdict.get("timings"):
        out["timings"] = [dict(t) for t in verdict["timings"] if isinstance(t, Mapping)]
    return out


def _apply(trial: Trial, fields: Mapping[str, Any]) -> None:
    for name, value in fields.items():
        setattr(trial, name, value)


def _trial_from_meta(
    memory: BranchMemory, meta: Any, op: str, by_name: Mapping[str, Family]
) -> Trial | None:
    """The trial of a proposal the search made, from the grid point its meta records."""
    if not isinstance(meta, Mapping) or not isinstance(meta.get("params"), Mapping):
        return None
    family = by_name.get(meta.get("family"))  # type: ignore[arg-type]
    if family is None:
        return None
    params = {**family.start, **meta["params"]}
    key = config_key(op, family.name, params)
    return memory.add(Trial(key, family.name, params, memory.next_order()))


def ingest(
    memory: BranchMemory, ctx: ProposalContext, by_name: Mapping[str, Family]
) -> Trial | None:
    """Fold what the context says (parent verdict, history, dead ends) into the memory;
    returns the parent's trial when the parent is a search source."""
    op = str(ctx.op.get("name"))
    for entry in ctx.history:
        if not isinstance(entry, Mapping):
            continue
        trial = _trial_from_meta(memory, entry.get("meta"), op, by_name)
        if trial is None and entry.get("move"):
            # our own proposal, known by its move line, judged since
            trial = next(
                (
                    t
                    for t in memory.trials.values()
                    if t.move == entry["move"] and t.status == PENDING
                ),
                None,
            )
        if trial is None:
            continue
        if trial.attempt is None and isinstance(entry.get("attempt"), int):
            trial.attempt = entry["attempt"]
        if entry.get("status") == VETOED and trial.status == PENDING:
            trial.status = VETOED
        fields = _verdict_fields(entry.get("verdict"))
        if entry.get("speedup") is not None:
            fields.setdefault("speedup", entry["speedup"])
        _apply(trial, fields)
    parent = _trial_from_meta(memory, ctx.parent_meta, op, by_name)
    if parent is not None:
        if parent.attempt is None:
            parent.attempt = ctx.parent_attempt
        _apply(parent, _verdict_fields(ctx.parent_verdict))
    memory.dead_moves.update(ctx.vetoed_moves)
    for move in ctx.dead_ends:
        memory.dead_moves.add(bare_move(move))
        for trial in memory.trials.values():
            if trial.move == move and trial.status == PENDING:
                trial.status = VETOED
    return parent


def bare_move(move: str) -> str:
    return move.split(" (from #", 1)[0]
