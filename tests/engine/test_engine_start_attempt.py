"""The user's kernel as attempt #0: verified before any proposal, the branches open from
it; a start that fails is said once and the branches start from its source anyway.
(Scripted runner and proposer: see tests/helpers.py for why.)"""

from __future__ import annotations

from dataclasses import replace

from helpers import ScriptedProposer, ScriptedRunner, move, scripted_op

from kernelladder.engine import create_run
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.run.options import RunOptions


def _run(tmp_path, start: str, moves):
    op = replace(scripted_op(), starting_source=start, start_label="your kernel (kernel.py)")
    opts = RunOptions(op="scripted", proposer="scripted", run_dir=str(tmp_path / "run"),
                      branches=2, gate="veto", device="cuda", max_attempts=3)  # fmt: skip
    return create_run(opts, runner=ScriptedRunner(), proposer=ScriptedProposer(moves), op=op)


async def test_start_passes_and_branches_open_from_it(tmp_path):
    run = _run(
        tmp_path, "# outcome: pass 1.0\n", {"b1": [move("pass 1.1")], "b2": [move("pass 1.2")]}
    )
    state = await run.run()
    events = read_events(run.run_dir)
    first = [e for e in events if isinstance(e, (ev.BranchOpened, ev.ProposalReceived))][:3]
    assert [type(e).__name__ for e in first] == ["BranchOpened", "ProposalReceived", "BranchOpened"]
    assert first[1].attempt == 0 and first[1].proposer == "start"
    assert first[2].from_attempt == 0
    assert state.attempts[0].verdict == "pass" and state.attempts[0].speedup == 1.0
    assert {state.attempts[n].parent for n in state.attempts if n} == {0}


async def test_a_failing_start_is_said_and_the_run_goes_on(tmp_path):
    run = _run(
        tmp_path, "# outcome: fail correctness off by 3\n", {"b1": [move("pass 1.1")], "b2": []}
    )
    state = await run.run()
    assert state.attempts[0].verdict == "fail"
    said = [n.message for n in state.notices if "attempt #0" in n.message]
    assert said == [
        "attempt #0 (your kernel (kernel.py)) did not pass the verifier; "
        "the branches start from its source anyway"
    ]
    assert state.branches["b2"].from_attempt is None
    assert state.attempts[1].verdict == "pass"
