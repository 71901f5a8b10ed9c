"""What a proposer is told (ProposalContext): the parent's source and verdict, the
branch's history and dead ends, the hints, the profile and the machine. The attempts'
sources and verdicts are kept as they are recorded, and read from the run directory once
where an earlier session recorded them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import ProposalContext
from kernelladder.engine.record.log import read_attempt_source, read_attempt_verdict
from kernelladder.engine.record.state import RunState
from kernelladder.engine.run.branch_line import closed_families
from kernelladder.engine.run.op_info import START_ATTEMPT, OpInfo


class ProposalInputs:
    """The attempts' sources and verdicts, and the context a proposal is asked with."""

    def __init__(
        self, state: RunState, *, run_dir: Path, op: OpInfo, device: Callable[[], str]
    ) -> None:
        self._state = state
        self._run_dir = run_dir
        self._op = op
        self._device = device  # the run's device, known once RunStarted is logged
        self._sources: dict[int, str] = {}
        self._verdicts: dict[int, dict[str, Any]] = {}

    def keep_source(self, n: int, source: str) -> None:
        self._sources[n] = source

    def keep_verdict(self, n: int, verdict: dict[str, Any]) -> None:
        self._verdicts[n] = verdict

    def source(self, n: int | None) -> str:
        """Attempt n's source; the op's starting source for None."""
        if n is None:
            return self._op.starting_source
        if n not in self._sources:
            self._sources[n] = read_attempt_source(self._run_dir, n)
        return self._sources[n]

    def verdict(self, n: int) -> dict[str, Any] | None:
        """Attempt n's full verdict; None while it has none (or its file is unreadable)."""
        a = self._state.attempts.get(n)
        if a is None or a.verdict is None:
            return None
        if n not in self._verdicts:
            try:
                self._verdicts[n] = read_attempt_verdict(self._run_dir, n)
            except (OSError, ValueError):
                return None
        return self._verdicts[n]

    def context(self, bid: str, parent: int | None) -> ProposalContext:
        s = self._state
        b = s.branches[bid]
        latest = next((n for n in reversed(b.attempts) if s.attempts[n].verdict is not None), None)
        fb = ((self.verdict(latest) or {}).get("feedback") or {}) if latest is not None else {}
        feedback = {
            "expected": fb.get("expected", ""),
            "saw": fb.get("saw", ""),
            "fence": fb.get("fence") or self._op.description.get("fence", ""),
            "dead_ends": list(b.dead_ends),
            "vetoed_families": list(b.vetoed_families),
        }
        return ProposalContext(
            op=self._op.description,
            branch_id=bid,
            strategy=b.strategy,
            parent_attempt=parent,
            parent_source=self.source(parent),
            parent_verdict=self.verdict(parent) if parent is not None else None,
            feedback=feedback,
            dead_ends=tuple(b.dead_ends),
            hints=s.hints_for(bid),
            history=tuple({**h, "source": self.source(h["attempt"])} for h in s.history(bid)),
            best_source=self.source(s.best_attempt) if s.best_attempt is not None else None,
            device=self._device(),
            vetoed_families=tuple(b.vetoed_families),
            vetoed_moves=tuple(b.vetoed_moves),
            stagnation=b.stagnation,
            stagnation_limit=s.setting("stagnation"),
            profile=self._profile_of(parent if parent is not None else START_ATTEMPT),
            hardware=self._hardware(),
            line_family=b.line_family,
            closed_families=closed_families(s, bid),
            parent_meta=dict(s.attempts[parent].meta) if parent in s.attempts else {},
        )

    def _profile_of(self, n: int) -> dict[str, Any] | None:
        """The summary of attempt n's profile, from the log (a resumed run has them too)."""
        taken = self._state.profiles.get(n) or {}
        return (
            dict(taken["summary"]) if taken.get("status") == "ok" and taken.get("summary") else None
        )

    def _hardware(self) -> dict[str, Any] | None:
        """What the latest verdict says of the machine it was judged on (GPU only)."""
        for n in sorted(self._verdicts, reverse=True):
            env = (self._verdicts[n] or {}).get("environment") or {}
            if env.get("gpu"):
                keys = ("gpu", "cc", "sms", "rates", "triton", "torch", "cuda")
                return {k: env[k] for k in keys if k in env}
        return None
