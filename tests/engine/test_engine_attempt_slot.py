"""AttemptStarted.slot: where an attempt ran. Older logs (no slot) still load; a real
local run on two CPU workers records which one verified each attempt."""

from __future__ import annotations

from kernelladder.app.folding import log_line
from kernelladder.engine import create_run
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners import LocalRunner


def test_attempt_started_round_trips_with_and_without_a_slot():
    started = ev.AttemptStarted(attempt=3, branch_id="b2", runner="pool:2", slot="box:1")
    d = started.to_dict()
    assert d["slot"] == "box:1" and ev.event_from_dict(d) == started
    # a log written before the field existed
    old = {"kind": "attempt_started", "seq": 7, "ts": 1.0, "schema_version": 1,
           "attempt": 3, "branch_id": "b2", "runner": "local", "retry": 0}  # fmt: skip
    loaded = ev.event_from_dict(old)
    assert isinstance(loaded, ev.AttemptStarted) and loaded.slot == ""
    assert log_line(loaded, None) == (3, "started on local")
    assert log_line(started, None)[1].endswith("started on pool:2 (box:1)")


async def test_a_local_run_on_two_cpu_workers_records_each_attempts_slot(tmp_path):
    options = RunOptions(
        op="rmsnorm", device="cpu", max_attempts=3, branches=2, gate="approve",
        run_dir=str(tmp_path / "run"), timeout_s=120,
    )  # fmt: skip
    run = create_run(options, runner=LocalRunner(device="cpu", slots=2))
    state = await run.run()
    assert state.finished
    events = read_events(tmp_path / "run")
    starts = {e.attempt: e.slot for e in events if isinstance(e, ev.AttemptStarted)}
    assert set(starts) == {1, 2, 3} and set(starts.values()) <= {"cpu:0", "cpu:1"}
    # the workers are handed out in turn: the first attempt takes cpu:0, the second cpu:1
    assert [starts[1], starts[2]] == ["cpu:0", "cpu:1"]
    assert {n: a.slot for n, a in fold(events).attempts.items()} == starts
