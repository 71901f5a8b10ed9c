"""The optional runner and proposer hooks are declared in protocols.py (RunnerBase,
ProposerBase): a runner written against the protocol alone, subclassing the base, gets
slot reporting and notices; one that offers neither still runs, with no slot recorded."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import ScriptedProposer, make_run, move, verdict_for

from kernelladder.engine.protocols import (
    Proposer,
    ProposerBase,
    Runner,
    RunnerBase,
    VerifyRequest,
)
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.verifier.contract.verdict import Verdict


class ProtocolOnlyRunner(RunnerBase):
    """Exactly the Runner protocol: the five required members, the hooks from the base."""

    name = "boxes"

    def __init__(self, *, reports_slot: bool) -> None:
        self.reports_slot = reports_slot

    @property
    def slots(self) -> int:
        return 1

    async def start(self) -> None:
        self.notice("warning", "box 2 is busy; starting on box 7")  # before the sink is set

    async def verify(self, request: VerifyRequest, on_progress=None, on_slot=None) -> Verdict:
        if on_slot is not None:
            on_slot("box:7")
        self.notice("error", "box 2 left the pool")
        return verdict_for(request.source, request.device)

    async def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"device": "cuda", "gpu": "Box GPU", "slots": 1, "host": "boxes"}


class ProtocolOnlyProposer(ProposerBase):
    name = "plain"

    def __init__(self) -> None:
        self.inner = ScriptedProposer([move("pass 1.2")])

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        return ["only"][:k]

    async def propose(self, ctx):
        return await self.inner.propose(ctx)


def test_the_bases_implement_the_whole_protocol():
    assert isinstance(ProtocolOnlyRunner(reports_slot=False), Runner)
    assert isinstance(ProtocolOnlyProposer(), Proposer)
    proposer = ProtocolOnlyProposer()
    proposer.check_ready()  # ready at once
    assert proposer.resumed({}, 1, []) is None and proposer.left_over() is None


async def test_a_runner_on_the_base_gets_slot_reporting_and_notices(tmp_path):
    runner = ProtocolOnlyRunner(reports_slot=True)
    run, _, _ = make_run(
        tmp_path, [], runner=runner, proposer=ProtocolOnlyProposer(), max_attempts=1
    )
    state = await run.run()
    assert state.finished
    events = read_events(tmp_path / "run")
    starts = [e for e in events if isinstance(e, ev.AttemptStarted)]
    assert [(e.attempt, e.slot, e.runner) for e in starts] == [(1, "box:7", "boxes")]
    notices = [(e.level, e.message) for e in events if isinstance(e, ev.Notice)]
    assert ("warning", "box 2 is busy; starting on box 7") in notices  # held until the sink
    assert ("error", "box 2 left the pool") in notices
    proposed = [e for e in events if isinstance(e, ev.ProposalReceived)]
    assert [e.proposer for e in proposed] == ["plain"]


async def test_a_runner_that_names_no_slot_still_records_its_attempts(tmp_path):
    runner = ProtocolOnlyRunner(reports_slot=False)
    run, _, _ = make_run(
        tmp_path, [], runner=runner, proposer=ProtocolOnlyProposer(), max_attempts=1
    )
    await run.run()
    events = read_events(tmp_path / "run")
    starts = [e for e in events if isinstance(e, ev.AttemptStarted)]
    assert [(e.attempt, e.slot) for e in starts] == [(1, "")]
    assert any(isinstance(e, ev.VerdictReady) and e.attempt == 1 for e in events)


async def test_the_run_ends_when_profiling_is_decided_after_its_last_verdict(tmp_path, monkeypatch):
    """Whether the run profiles (`ncu --version`, in a thread at the start) can be decided
    after the last verdict (a loaded machine): the run once never ended then. The branch
    went idle without a word while the run's supervisor, woken by the decision, still saw
    it verifying; nothing woke it again. Double: availability (no ncu here), answering
    only after the verdict."""
    import threading
    import time

    from kernelladder.verifier.host import profile as profile_mod

    judged = threading.Event()

    def late(*args, **kwargs):
        judged.wait(10)
        time.sleep(0.2)  # the branch is waiting for this answer by now
        return False, "Nsight Compute (ncu) not found (double)"

    class JudgedRunner(ProtocolOnlyRunner):
        async def verify(self, request, on_progress=None, on_slot=None):
            verdict = await super().verify(request, on_progress, on_slot)
            judged.set()
            return verdict

    monkeypatch.setattr(profile_mod, "availability", late)
    run, _, _ = make_run(
        tmp_path,
        [],
        runner=JudgedRunner(reports_slot=False),
        proposer=ProtocolOnlyProposer(),
        max_attempts=1,
    )
    state = await asyncio.wait_for(run.run(), 30)
    assert state.finished
    notices = [e.message for e in read_events(tmp_path / "run") if isinstance(e, ev.Notice)]
    assert any("profiling off" in m for m in notices)
