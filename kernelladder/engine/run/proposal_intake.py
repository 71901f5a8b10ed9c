"""A branch's proposal, asked of the proposer and taken in: ProposalRequested, the
proposer's answer (a failure, its cost counted; a note said once a session; a candidate
dropped when its branch closed or its family was taken meanwhile), then the candidate
numbered, its source written, its parent and undo cost judged, ProposalReceived."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kernelladder.engine.protocols import Proposal, Proposer, ProposerError, ProposerExhausted
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import RunState
from kernelladder.engine.run.branch_line import taken_meanwhile
from kernelladder.engine.run.gate_keeper import GateKeeper
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.op_info import START_ATTEMPT
from kernelladder.engine.run.proposal_inputs import ProposalInputs

PROPOSAL_FAILURE_LIMIT = 3  # failed proposals in a row before a branch gives up


@dataclass(frozen=True)
class Received:
    """A proposal numbered and recorded: what its gate and verification need."""

    attempt: int
    source: str
    move: str
    undo_cost: str
    undo_reason: str


class ProposalIntake:
    def __init__(
        self,
        state: RunState,
        emit: Callable[[ev.Event], object],
        *,
        request_stop: Callable[..., None],
        proposer: Proposer,
        proposer_name: str,
        write_source: Callable[[int, str], str],
        inputs: ProposalInputs,
        gates: GateKeeper,
        retry_backoff_s: float,
    ) -> None:
        self._state = state
        self._emit = emit
        self._request_stop = request_stop  # Run's: (rule, by=, detail=)
        self._proposer = proposer
        self._proposer_name = proposer_name  # recorded when the proposer names none
        self._write_source = write_source  # into the run directory; returns its hash
        self._inputs = inputs
        self._gates = gates
        self.retry_backoff_s = retry_backoff_s
        self.reserved = 0  # proposals asked for and not yet numbered
        self._next_number = state.next_attempt
        self._asking: dict[str, asyncio.Future[Proposal]] = {}
        self._said: set[str] = set()  # proposers' notes already in this session's log

    def cancel(self, branch_ids: Collection[str]) -> None:
        """Drop the proposals these branches wait for (a prune)."""
        for bid in branch_ids:
            task = self._asking.get(bid)
            if task is not None and not task.done():
                task.cancel()

    async def ask(self, bid: str) -> Received | bool:
        """One proposal for branch bid, numbered and recorded; else whether the branch
        goes on (True: ask again once ready; False: the branch is done)."""
        b = self._state.branches[bid]
        shown = b.head  # what the proposer is shown; the proposal names what it came from
        self.reserved += 1
        reserved = True
        try:
            self._emit(ev.ProposalRequested(branch_id=bid, parent_attempt=shown))
            ctx = self._inputs.context(bid, shown)
            task = asyncio.ensure_future(self._proposer.propose(ctx))
            self._asking[bid] = task
            try:
                proposal = await task
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise
                return True  # the proposal was cancelled by a prune; the branch decides
            except ProposerExhausted as exc:
                detail = one_line(exc) or "no untried move left"
                self._emit(
                    ev.BranchExhausted(
                        branch_id=bid, rule=ev.RULE_PROPOSER_EXHAUSTED, detail=detail
                    )
                )
                return False
            except ProposerError as exc:
                return await self._failed(bid, one_line(exc), exc.retryable, exc.fatal, exc)
            except Exception as exc:
                return await self._failed(bid, f"{type(exc).__name__}: {one_line(exc)}")
            finally:
                self._asking.pop(bid, None)
            if (
                not isinstance(proposal, Proposal)
                or not isinstance(proposal.source, str)
                or not proposal.source.strip()
            ):
                return await self._failed(bid, "the proposer returned no source")
            self._say_once(getattr(proposal, "notice", None))
            if self._state.branches[bid].closed or self._state.stopping:
                # pruned or stopped meanwhile: dropped unnumbered, what it cost counted
                if proposal.tokens_in or proposal.tokens_out or proposal.cost_usd:
                    self._emit(ev.ProposalFailed.of(bid, "dropped: its branch closed", proposal))
                return False
            stale = taken_meanwhile(self._state, bid, _family(proposal), ctx.closed_families)
            if stale is not None and not self._proposer.replays_recorded_undo:
                # dropped unnumbered; the next context names the family as closed
                self._emit(ev.Notice(level="info", message=f"{stale}; asked again", branch_id=bid))
                return True
            n = max(self._next_number, self._state.next_attempt)
            self._next_number = n + 1
            self._inputs.keep_source(n, proposal.source)
            source_hash = self._write_source(n, proposal.source)
            parent = self._gates.parent_of(bid, shown, proposal)
            recorded = self._proposer.replays_recorded_undo
            cost, reason = self._gates.undo_cost(bid, parent, proposal, recorded)
            self.reserved -= 1
            reserved = False
            self._emit(
                ev.ProposalReceived(
                    branch_id=bid,
                    attempt=n,
                    parent_attempt=parent,
                    source_hash=source_hash,
                    strategy=proposal.strategy or b.strategy,
                    move=one_line(proposal.move or "(no description)"),
                    undo_cost=cost,
                    undo_reason=one_line(reason),
                    proposer=self._proposer.name or self._proposer_name,
                    model=proposal.model,
                    tokens_in=int(proposal.tokens_in or 0),
                    tokens_out=int(proposal.tokens_out or 0),
                    cost_usd=float(proposal.cost_usd or 0.0),
                    family=_family(proposal),
                    meta=_jsonable_meta(proposal),
                )
            )
        finally:
            if reserved:
                self.reserved -= 1
        return Received(n, proposal.source, proposal.move, cost, reason)

    def record_start(self, bid: str, strategy: str, source: str, label: str) -> int:
        """The user's kernel as attempt #0 of branch bid, recorded unchanged."""
        self._emit(ev.ProposalRequested(branch_id=bid, parent_attempt=None))
        n = START_ATTEMPT
        self._next_number = max(self._next_number, n + 1)
        self._inputs.keep_source(n, source)
        self._emit(
            ev.ProposalReceived(
                branch_id=bid,
                attempt=n,
                parent_attempt=None,
                source_hash=self._write_source(n, source),
                strategy=strategy,
                move=f"the start: {label}, unchanged",
                undo_cost=ev.UNDO_LOW,
                undo_reason="nothing changed",
                proposer="start",
            )
        )
        return n

    # --- what comes back that is not a candidate ---------------------------------------

    def _say_once(self, notice: str | None) -> None:
        """A proposer's note (e.g. "tokens estimated"), once a session in the log."""
        if notice and notice not in self._said:
            self._said.add(notice)
            self._emit(ev.Notice(level="warning", message=one_line(notice)))

    async def _failed(
        self, bid: str, line: str, retryable: bool = False, fatal: bool = False, spent: Any = None
    ) -> bool:
        self._say_once(getattr(spent, "notice", None))
        # a reply rejected after it was paid for: its tokens count against the budgets
        self._emit(ev.ProposalFailed.of(bid, line, spent, retryable=retryable))
        level = "error" if fatal else "warning"
        self._emit(ev.Notice(level=level, message=f"{bid}: proposer: {line}", branch_id=bid))
        if fatal:
            self._request_stop(ev.RULE_ERROR, by="engine", detail=f"proposer: {line}")
            return False
        failures = self._state.branches[bid].proposal_failures
        if failures >= PROPOSAL_FAILURE_LIMIT:
            detail = f"{failures} proposals in a row failed; last: {line}"
            self._emit(
                ev.BranchExhausted(branch_id=bid, rule=ev.RULE_REPEATED_FAILURE, detail=detail)
            )
            return False
        if retryable:
            await asyncio.sleep(min(self.retry_backoff_s * 2.0**failures, 30.0))
        return True


def _jsonable_meta(proposal: Proposal) -> dict[str, Any]:
    """The proposal's meta as plain JSON (it goes into the log)."""
    try:
        return json.loads(json.dumps(dict(proposal.meta or {}), default=str))
    except (TypeError, ValueError):
        return {}


def _family(proposal: Proposal) -> str | None:
    family = (proposal.meta or {}).get("family")
    return str(family) if family else None
