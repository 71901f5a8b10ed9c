"""Nsight Compute profiles taken during a run: whether the run profiles at all, which
attempts are profiled and why, the ProfileReady each records. A part of Run (run.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernelladder.engine import events as ev
from kernelladder.engine.op_info import START_ATTEMPT


class Profiling:
    """Run's profiling (Run inherits it; it uses Run's state, slots and options)."""

    def _profile_reason(self, bid: str, n: int) -> str:
        """Why attempt n (or its branch's best) is profiled now; "" when it is not."""
        if not self._profiling:
            return ""
        s = self.state
        a = s.attempts.get(n)
        done = self._profiled | set(s.profiles)
        if a is not None and a.verdict == "pass" and n not in done:
            if n == START_ATTEMPT and self.op.start_label:
                return "the start"
            if s.best_attempt == n:
                return "new best"
        b = s.branches[bid]
        if b.best_attempt is None or b.best_attempt in done:
            return ""
        since = [m for m in b.attempts if m > b.best_attempt and s.attempts[m].verdict]
        return "branch stalled" if len(since) == 3 else ""

    async def _profile(self, bid: str, n: int, why: str) -> None:
        from kernelladder.verifier.profile import profile_candidate

        target = n if why != "branch stalled" else self.state.branches[bid].best_attempt
        assert target is not None and self._slots is not None
        self._profiled.add(target)
        # the same GPU, between verifications: with workers sharing it, alone
        async with self._slots, self.runner.gpu_alone():
            outcome = await asyncio.to_thread(
                profile_candidate, self.op.wire, self._source(target),
                self.run_dir / "profiles", str(target), self.options.timeout_s,
            )  # fmt: skip
        if outcome.status == "unavailable":
            self._profiling = False  # said once; the run goes on without profiles
            self._emit(ev.Notice(level="warning", message=f"profiling off: {outcome.reason}"))
        report = ""
        if outcome.report:
            try:
                report = str(Path(outcome.report).relative_to(self.run_dir))
            except ValueError:
                report = outcome.report
        self._emit(
            ev.ProfileReady(
                attempt=target,
                branch_id=bid,
                status=outcome.status,
                reason=why if outcome.status == "ok" else outcome.reason,
                summary=outcome.summary.to_dict() if outcome.summary else {},
                report=report,
            )
        )

    async def _profiling_notice(self) -> str:
        """Decide once whether this run profiles; the line saying why not, if not."""
        if self.options.profile == "off":
            return ""
        if not self.device.startswith("cuda"):
            return ""
        if self.options.remote:
            return "profiling off: Nsight Compute runs with the local runner only"
        from kernelladder.verifier.profile import availability

        ok, line = await asyncio.to_thread(availability)
        self._profiling = ok
        return "" if ok else f"profiling off: {line}"
