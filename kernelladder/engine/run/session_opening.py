"""A session's opening: the runner started, RunStarted for a new run or RunReopened for
a resumed one (with the attempts it verifies again), the notices said once a session
(the reference, the proposers' knowledge, the caller's warnings, attach being off, a
sandbox without walls); then a new run's first branches, or a resumed run's proposer
told what was proposed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kernelladder.engine.protocols import Proposer, ProposerError, Runner
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import AttemptStatus, RunState
from kernelladder.engine.run import commands
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import OpInfo
from kernelladder.engine.run.options import RunOptions


class SessionOpening:
    def __init__(
        self,
        state: RunState,
        emit: Callable[[ev.Event], object],
        *,
        runner: Runner,
        proposer: Proposer,
        record_start: Callable[[str, str, str, str], int],
        op: OpInfo,
        options: RunOptions,
        run_id: str,
        resumed: bool,
        repaired_tail: bool,
        overrides: dict[str, Any],
        notices: Sequence[str],
    ) -> None:
        self._state = state
        self._emit = emit
        self._runner = runner
        self._proposer = proposer
        self._record_start = record_start  # the user's kernel recorded as attempt #0
        self._op = op
        self._options = options  # a new run records them all in RunStarted; its branches
        self._run_id = run_id
        self._resumed = resumed  # an earlier session started the run
        self._repaired_tail = repaired_tail  # a torn last line was cut from the log
        self._overrides = dict(overrides)  # options this resume changed
        self._notices = list(notices)  # the caller's warnings for this session

    async def start_runner(self, early_error: Exception | None) -> str:
        """Start the runner, unless it failed before run() (early_error); the line saying
        why it did not start, else ""."""
        failure = early_error
        if failure is None:
            try:
                await self._runner.start()
            except Exception as exc:
                failure = exc
        return f"the runner did not start: {one_line(failure)}" if failure is not None else ""

    def open(self, info: dict[str, Any]) -> dict[str, list[int]]:
        """RunStarted, or RunReopened; returns a resumed run's attempts left without a
        verdict, per branch (verified first, in order, before new proposals)."""
        work: dict[str, list[int]] = {}
        if self._resumed:
            work, requeued = resume_plan(self._state)
            self._emit(
                ev.RunReopened(
                    repaired_tail=self._repaired_tail,
                    requeued_attempts=tuple(requeued),
                    settings=dict(self._overrides),
                )
            )
            return work
        options = self._options
        device = str(info.get("device") or options.device or "cpu")
        self._emit(
            ev.RunStarted(
                run_id=self._run_id,
                op=self._op.name,
                op_kind=self._op.kind,
                proposer=options.proposer,
                model=options.model,
                device=device,
                gpu=info.get("gpu"),
                runner=self._runner.name,
                target=options.target,
                settings=options.to_dict(),
                speed_measured=device.startswith("cuda"),
                sandbox=info.get("sandbox"),
            )
        )
        return work

    def tell(self, info: dict[str, Any], control_error: str) -> None:
        """The notices said once a session, after its first event."""
        if self._op.reference_note and not self._resumed:
            self._emit(ev.Notice(level="info", message=self._op.reference_note))
        knowledge = self._op.description.get("knowledge_files") or []
        if knowledge and not self._resumed:  # what the api/code proposers are given
            files = "; ".join(str(f) for f in knowledge)
            self._emit(ev.Notice(level="info", message=f"knowledge for the proposers: {files}"))
        for message in self._notices:
            self._emit(ev.Notice(level="warning", message=message))
        if control_error:
            self._emit(ev.Notice(level="warning", message=control_error))
        walls = str(info.get("sandbox") or "")
        if walls.startswith("off"):  # said once per session, resumed ones too
            self._emit(
                ev.Notice(level="warning", message=f"sandbox {walls}: candidates run without walls")
            )

    async def open_branches(self, verify: Callable[[str, int, str], Awaitable[None]]) -> str:
        """A new run's branches, one per strategy the proposer names; with the user's own
        kernel, it is attempt #0, verified on the first branch before any proposal, and
        the others open from it once it passed. The line saying why none opened, else ""."""
        op, branches = self._op, self._options.branches
        try:
            labels = list(self._proposer.strategies(op.description, branches))
        except ProposerError as exc:
            self._emit(ev.Notice(level="error", message=f"proposer: {one_line(exc)}"))
            return f"proposer: {one_line(exc)}"
        labels = labels[: max(1, branches)] or ["default"]
        if not op.start_label:
            for label in labels:
                self._emit(ev.BranchOpened(branch_id=self._state.next_branch_id, strategy=label))
            return ""
        first = self._state.next_branch_id
        self._emit(ev.BranchOpened(branch_id=first, strategy=labels[0]))
        n = self._record_start(first, labels[0], op.starting_source, op.start_label)
        await verify(first, n, op.starting_source)
        a = self._state.attempts.get(n)
        passed = a is not None and a.verdict == "pass"
        if a is not None and a.verdict == "fail":
            self._emit(
                ev.Notice(
                    level="warning",
                    message=f"attempt #0 ({op.start_label}) did not pass the verifier; "
                    "the branches start from its source anyway",
                )
            )
        for label in labels[1:]:
            self._emit(
                ev.BranchOpened(
                    branch_id=self._state.next_branch_id,
                    strategy=label,
                    from_attempt=n if passed else None,
                )
            )
        return ""

    def tell_proposer(self) -> None:
        """A proposer that keeps its own place (replay: a queue of saved sources) learns
        what this run already proposed: (branch label, source hash) in attempt order."""
        s = self._state
        label = {bid: b.strategy for bid, b in s.branches.items()}  # what propose() is asked for
        proposed = [
            (label.get(a.branch_id, a.strategy), a.source_hash)
            for _, a in sorted(s.attempts.items())
        ]
        self._proposer.resumed(self._op.description, self._options.branches, proposed)


def resume_plan(state: RunState) -> tuple[dict[str, list[int]], list[int]]:
    """Attempts a killed or stopped run left without a verdict, grouped by branch; and
    those of them verified again without a gate to pass first (RunReopened names them)."""
    work: dict[str, list[int]] = {}
    requeued = []
    for n in sorted(state.attempts):
        a = state.attempts[n]
        b = state.branches.get(a.branch_id)
        if b is None or b.closed:
            continue
        gate_pending = a.status == AttemptStatus.GATED and a.gate_id in state.pending_gates
        gate_pending = gate_pending or commands.set_aside_by_stop(state, n)
        if a.needs_verify or gate_pending:
            work.setdefault(a.branch_id, []).append(n)
            if not gate_pending:
                requeued.append(n)
    return work, requeued
