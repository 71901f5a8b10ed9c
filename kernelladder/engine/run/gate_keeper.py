"""The run's gates, a collaborator of Run (run.py): which attempt a proposal was made
from, its undo cost against that parent, and the wait at a gate.

Reads: the run's state (attempts, branches, gates), this session's gate policy, the
options' gate timeout and its policy, the clock. Emits: Notice (a proposal naming a
base that is no attempt of the run), GateRaised, and GateResolved when the policy, an
earlier session's leftover or a timeout decides. A person's answers, new hints and a
stop resolve gates through commands.py; the wait here sees them in the state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kernelladder.engine.protocols import Proposal
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import RunState
from kernelladder.engine.run.gating import proposal_base, recorded_undo, undo_of
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.options import RunOptions


class GateKeeper:
    def __init__(
        self,
        state: RunState,
        emit: Callable[[ev.Event], object],
        wait_change: Callable[[float | None], Awaitable[None]],
        clock: Callable[[], float],
        policy: str,
        options: RunOptions,
    ) -> None:
        self._state = state
        self._emit = emit
        self._wait_change = wait_change
        self._clock = clock
        self.policy = policy  # this session's: options.gate, or an unattended one
        self._timeout_s = options.gate_timeout_s
        self._timeout_policy = options.gate_timeout_policy

    def parent_of(self, bid: str, shown: int | None, proposal: Proposal) -> int | None:
        """The attempt the proposal's source was derived from (Proposal.base_attempt); a
        base that is no attempt of this run falls back to the shown parent, with a notice."""
        base, why = proposal_base(proposal, shown)
        if base is None or base == shown or base in self._state.attempts:
            return base
        made_from = f"#{shown}" if shown is not None else "the start"
        self._emit(
            ev.Notice(
                level="warning",
                message=f"{bid}: the proposal names #{base} as its base ({why}), which is no "
                f"attempt of this run; recorded as made from {made_from}",
                branch_id=bid,
            )
        )
        return shown

    def undo_cost(
        self, bid: str, parent: int | None, proposal: Proposal, recorded: bool = False
    ) -> tuple[str, str]:
        """The move's (undo cost, reason): against its true parent, and whether it changes
        its branch's line (gating.undo_of, the one rule for every proposer); `recorded`:
        the proposal carries a saved run's final rating (a replay), which is kept."""
        if recorded:
            return recorded_undo(proposal)
        return undo_of(self._state, bid, parent, proposal)

    def raise_gate(self, bid: str, n: int, move: str, cost: str, reason: str) -> str:
        """Raise a gate for attempt n; an unattended policy decides it at once. Returns
        the gate's id (decision() waits for it)."""
        gid = self._state.next_gate_id
        timeout = self._timeout_s if self.policy == "ask" else None
        self._emit(
            ev.GateRaised(
                gate_id=gid, branch_id=bid, attempt=n, move=one_line(move), undo_cost=cost,
                reason=one_line(reason), policy=self.policy, timeout_s=timeout,
            )
        )  # fmt: skip
        if self.policy != "ask":
            self._emit(ev.GateResolved(gate_id=gid, decision=self.policy, by="policy"))
        return gid

    def resumed(self, gid: str) -> str:
        """A gate an earlier session left pending: this session's policy decides it when
        that policy is unattended (no one here may be able to answer), else it waits."""
        g = self._state.gates[gid]
        if g.pending and self.policy != "ask":
            self._emit(
                ev.GateResolved(
                    gate_id=gid,
                    decision=self.policy,
                    by="policy",
                    note=f"left pending by an earlier session; this session's policy is "
                    f"{self.policy}",
                )
            )
        return gid

    async def decision(self, gid: str) -> str:
        """Wait until the gate is resolved (a person, hints, a stop, or its timeout)."""
        g = self._state.gates[gid]
        while g.pending:
            timeout = None
            if g.deadline is not None:
                timeout = g.deadline - self._clock()
                if timeout <= 0:
                    self._emit(
                        ev.GateResolved(
                            gate_id=gid,
                            decision=self._timeout_policy,
                            by="timeout",
                            note=f"no answer within {g.timeout_s:g}s",
                        )
                    )
                    break
            await self._wait_change(timeout)
        return g.decision or "veto"
