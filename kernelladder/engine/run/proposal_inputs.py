"""What a proposer is told (ProposalContext): the parent's source and verdict, the
branch's history and dead ends, the hints, the profile and the machine. Sources and
verdicts are read from the run directory once and kept. And what comes back that is not
a candidate: a failure (what its reply cost counted), a note said once. A part of Run
(run.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from kernelladder.engine.protocols import ProposalContext
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_attempt_source, read_attempt_verdict
from kernelladder.engine.run.branch_line import closed_families
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import START_ATTEMPT

PROPOSAL_FAILURE_LIMIT = 3  # failed proposals in a row before a branch gives up


class ProposalInputs:
    """Run's sources, verdicts and proposal context (Run inherits it)."""

    def _source(self, n: int | None) -> str:
        if n is None:
            return self.op.starting_source
        if n not in self._sources:
            self._sources[n] = read_attempt_source(self.run_dir, n)
        return self._sources[n]

    def _verdict(self, n: int) -> dict[str, Any] | None:
        a = self.state.attempts.get(n)
        if a is None or a.verdict is None:
            return None
        if n not in self._verdicts:
            try:
                self._verdicts[n] = read_attempt_verdict(self.run_dir, n)
            except (OSError, ValueError):
                return None
        return self._verdicts[n]

    def _context(self, bid: str, parent: int | None) -> ProposalContext:
        s = self.state
        b = s.branches[bid]
        latest = next((n for n in reversed(b.attempts) if s.attempts[n].verdict is not None), None)
        fb = ((self._verdict(latest) or {}).get("feedback") or {}) if latest is not None else {}
        feedback = {
            "expected": fb.get("expected", ""),
            "saw": fb.get("saw", ""),
            "fence": fb.get("fence") or self.op.description.get("fence", ""),
            "dead_ends": list(b.dead_ends),
            "vetoed_families": list(b.vetoed_families),
        }
        return ProposalContext(
            op=self.op.description,
            branch_id=bid,
            strategy=b.strategy,
            parent_attempt=parent,
            parent_source=self._source(parent),
            parent_verdict=self._verdict(parent) if parent is not None else None,
            feedback=feedback,
            dead_ends=tuple(b.dead_ends),
            hints=s.hints_for(bid),
            history=tuple({**h, "source": self._source(h["attempt"])} for h in s.history(bid)),
            best_source=self._source(s.best_attempt) if s.best_attempt is not None else None,
            device=self.device,
            vetoed_families=tuple(b.vetoed_families),
            vetoed_moves=tuple(b.vetoed_moves),
            stagnation=b.stagnation,
            stagnation_limit=s.setting("stagnation"),
            profile=self._profile_of(parent if parent is not None else START_ATTEMPT),
            hardware=self._hardware(),
            line_family=b.line_family,
            closed_families=closed_families(s, bid),
        )

    def _profile_of(self, n: int) -> dict[str, Any] | None:
        """The summary of attempt n's profile, from the log (a resumed run has them too)."""
        taken = self.state.profiles.get(n) or {}
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

    # --- what comes back that is not a candidate ---------------------------------------

    def _say_once(self, notice: str | None) -> None:
        """A proposer's note (e.g. "tokens estimated"), once a session in the log."""
        if notice and notice not in self._said:
            self._said.add(notice)
            self._emit(ev.Notice(level="warning", message=one_line(notice)))

    async def _proposal_failed(
        self, bid: str, line: str, retryable: bool, fatal: bool, spent: Any = None
    ) -> bool:
        self._say_once(getattr(spent, "notice", None))
        # a reply rejected after it was paid for: its tokens count against the budgets
        self._emit(ev.ProposalFailed.of(bid, line, spent, retryable=retryable))
        level = "error" if fatal else "warning"
        self._emit(ev.Notice(level=level, message=f"{bid}: proposer: {line}", branch_id=bid))
        if fatal:
            self._request_stop(ev.RULE_ERROR, by="engine", detail=f"proposer: {line}")
            return False
        failures = self.state.branches[bid].proposal_failures
        if failures >= PROPOSAL_FAILURE_LIMIT:
            detail = f"{failures} proposals in a row failed; last: {line}"
            self._emit(
                ev.BranchExhausted(branch_id=bid, rule=ev.RULE_REPEATED_FAILURE, detail=detail)
            )
            return False
        if retryable:
            await asyncio.sleep(min(self.retry_backoff_s * 2.0**failures, 30.0))
        return True
