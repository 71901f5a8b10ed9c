"""A deploy's result goes into its run's log as a DeployChecked event: appended directly to
a run no process writes, recorded by the live run's own engine (through its control
channel) while it runs, so the log keeps one writer. The fold keeps it beside the run:
it changes neither the run's elapsed time nor whether its log reached the end."""

from __future__ import annotations

import asyncio

from helpers import HeldProposer, ScriptedRunner, move, saved_run, scripted_op, until

from kernelladder.app.replay import log_ending
from kernelladder.deploy.record import record
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold, latest_deploys
from kernelladder.engine.record.summary import summarize


def result_of(attempt: int | None, status: str = "match") -> dict:
    return {
        "attempt": attempt, "op": "rmsnorm", "model": {"name": "llama-3-8b"},
        "status": status, "summary": f"#{attempt} {status}", "schema_version": 1,
    }  # fmt: skip


def test_a_deploy_beside_a_finished_run_is_appended_and_folded_beside_it(tmp_path):
    run = saved_run(tmp_path)
    before = fold(read_events(run))
    done = record(str(run), result_of(1))
    assert (done.seq, done.how) == (before.events, "appended to the log")
    again = record(str(run), result_of(1, "mismatch"))
    state = fold(read_events(run))
    assert [d["status"] for d in state.deploys] == ["match", "mismatch"]
    assert latest_deploys(state)[1]["seq"] == again.seq
    assert state.finished and state.elapsed_s == before.elapsed_s
    assert log_ending(run) == ""  # the log still reached RunFinished
    assert [d["attempt"] for d in summarize(state)["deploys"]] == [1, 1]
    assert "deploys" not in summarize(before)


def test_a_deploy_of_an_attempt_the_run_does_not_have_is_not_recorded(tmp_path):
    run = saved_run(tmp_path)
    count = len(read_events(run))
    done = record(str(run), result_of(99))
    assert done.seq is None and "no attempt #99 in this run" in done.how
    assert len(read_events(run)) == count


async def test_a_live_run_records_the_deploy_itself_through_its_control_channel(tmp_path):
    from kernelladder.engine import create_run
    from kernelladder.engine.run.options import RunOptions

    options = RunOptions(
        op="scripted", proposer="scripted", branches=1, gate="veto", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=20, stagnation=20,
    )  # fmt: skip
    proposer = HeldProposer({"b1": [move("pass 1.2", "BLOCK 256")]})
    run = create_run(options, runner=ScriptedRunner(device="cuda"), proposer=proposer,
                     op=scripted_op())  # fmt: skip
    task = asyncio.create_task(run.run())
    try:
        await until(lambda: run.state.judged >= 1, "a verdict")
        attempt = max(run.state.attempts)
        done = await asyncio.to_thread(record, str(run.run_dir), result_of(attempt))
        assert done.how == "recorded by the live run"
        assert run.state.deploys[-1]["seq"] == done.seq
        assert isinstance(run.log.read_from(done.seq, done.seq + 1)[0], ev.DeployChecked)
        assert not run.finished
    finally:
        await run.stop("user", cancel=True)
        await asyncio.wait_for(task, 30)
    # the run closed its log: the next deploy is appended directly
    later = await asyncio.to_thread(record, str(run.run_dir), result_of(attempt, "mismatch"))
    assert later.how == "appended to the log"
    kinds = [e.kind for e in read_events(run.run_dir)]
    assert kinds.count("deploy_checked") == 2 and kinds[-1] == "deploy_checked"
