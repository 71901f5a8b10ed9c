"""`kernelladder replay`: the summary of a saved run, equal to the live run's summary;
bad input is one line and exit 2. Runs are produced by the engine on scripted doubles
(helpers.py says why)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from helpers import make_run, move

from kernelladder.app.headless import HeadlessView, TerminalGatePrompt, render_state
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.summary import summarize


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", *args], capture_output=True, text=True, **kw
    )


async def test_replay_json_equals_the_live_summary(tmp_path):
    moves = [move("pass 1.2"), move("fail correctness e 1"), move("pass 1.6", undo="high")]
    run, _, _ = make_run(tmp_path, moves, gate="approve")
    state = await run.run()
    live = json.loads(json.dumps(summarize(state)))
    out = _cli("replay", str(run.run_dir), "--json")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1
    assert json.loads(out.stdout) == live
    assert live["best"]["attempt"] == 3 and live["best_speedup"] == 1.6
    assert live["gates"] == {"raised": 1, "approved": 1, "vetoed": 0, "pending": 0}
    text = _cli("replay", str(run.run_dir))
    assert text.returncode == 0 and "1.6x" in text.stdout and "b1" in text.stdout


def test_replay_bad_input_is_one_line(tmp_path):
    out = _cli("replay", str(tmp_path / "missing"))
    assert (
        out.returncode == 2 and out.stderr.count("\n") == 1 and "not a run directory" in out.stderr
    )
    (tmp_path / "events.jsonl").write_text("")
    out = _cli("replay", str(tmp_path))
    assert out.returncode == 2 and "no events" in out.stderr


async def test_headless_plain_lines_and_live_panel(tmp_path):
    run, _, _ = make_run(tmp_path, [move("pass 1.2"), move("fail load no kernel")])
    plain = io.StringIO()
    view = HeadlessView(run, stream=plain, live=False)
    follower = view.follow()
    import asyncio

    task = asyncio.ensure_future(follower)
    state = await run.run()
    await asyncio.wait_for(task, 10)
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("run ") and lines[-1].startswith("finished: all-branches-done")
    assert "#1 b1 pass: 1.2x, 50% of floor" in lines, lines
    assert "#2 b1 FAIL at load: no kernel" in lines
    assert view.state == state  # the view's own fold equals the engine's
    panel = io.StringIO()
    from rich.console import Console

    Console(file=panel, width=100).print(render_state(state))
    assert "exhausted (proposer-exhausted)" in panel.getvalue()


async def test_terminal_gate_prompt_answers_through_the_run(tmp_path):
    import asyncio

    run, runner, _ = make_run(tmp_path, [move("pass 1.3", "risky", undo="high")], gate="ask")
    task = asyncio.ensure_future(run.run())
    while "g1" not in run.state.pending_gates:
        await asyncio.sleep(0.01)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"maybe\nv\n")
    from rich.console import Console

    out = io.StringIO()
    with os.fdopen(read_fd, "r") as stdin:
        prompt = TerminalGatePrompt(run, Console(file=out), stdin=stdin)
        gate = next(e for e in run.log.read_from(0) if isinstance(e, ev.GateRaised))
        await asyncio.wait_for(prompt.ask(gate), 10)
    os.close(write_fd)
    state = await asyncio.wait_for(task, 10)
    assert state.gates["g1"].decision == "veto" and state.gates["g1"].by == "user"
    assert out.getvalue().count("approve or veto?") == 2  # "maybe" was asked again
    assert runner.calls == []


async def test_reverify_reports_verdict_changes(tmp_path):
    """A run recorded with the scripted runner double (which said attempt 2 failed) is
    re-verified by the real CPU worker, which passes it: the change is reported."""
    from helpers import ScriptedProposer, ScriptedRunner

    from kernelladder.engine import create_run, load_op_info
    from kernelladder.engine.protocols import Proposal
    from kernelladder.engine.run.options import RunOptions

    op = load_op_info("rmsnorm")
    start = op.starting_source

    def real(outcome: str) -> Proposal:
        return Proposal(source=start + f"\n# outcome: {outcome}\n", strategy="s",
                        move=outcome, undo_cost="low", undo_reason="")  # fmt: skip

    options = RunOptions(op="rmsnorm", device="cpu", branches=1, run_dir=str(tmp_path / "r"))
    run = create_run(
        options, runner=ScriptedRunner(device="cpu"),
        proposer=ScriptedProposer([real("pass"), real("fail correctness made up")]), op=op,
    )  # fmt: skip
    await run.run()
    out = _cli("replay", str(run.run_dir), "--reverify", "--json", "--device", "cpu")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)["reverify"]
    assert report["checked"] == 2 and report["errors"] == []
    assert report["differences"] == [{"attempt": 2, "verdict": ["fail at correctness", "pass"]}]


def test_the_summary_names_the_family_the_best_and_each_branch_stand_on():
    """A branch opened as multi-row whose best is a one-row-per-program kernel: the JSON
    summary says so as the screen does (its strategy field stays what it was opened with)."""
    from helpers import H100_RUNS

    from kernelladder.engine.record.log import read_events
    from kernelladder.engine.record.state import fold

    state = fold(read_events(H100_RUNS / "rmsnorm-search"))
    out = summarize(state)
    best = state.attempts[out["best"]["attempt"]]
    assert out["best"]["family"] == best.family
    assert out["best"]["strategy"] == best.strategy
    labels = {b["id"]: b["label"] for b in out["branches"]}
    assert labels == {b: state.branch_label(b) for b in state.branches}
    b1 = next(b for b in out["branches"] if b["id"] == "b1")
    assert (b1["strategy"], b1["label"]) == ("multi-row", "one-row-per-program (was multi-row)")
    assert out["best"]["family"] == "one-row-per-program" != out["best"]["strategy"]


def test_a_replays_notices_say_they_were_recorded_and_when():
    # the H100 attention run's last notice tells of workers kept warm "for the next run on
    # this machine": in a replay that was then, not now
    from helpers import H100_RUNS

    example = H100_RUNS / "attention-search"
    out = _cli("replay", str(example), env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in (example / "events.jsonl").open()]
    notice = next(e for e in events if "warm for the next run" in e.get("message", ""))
    seconds = int(notice["ts"] - events[0]["ts"])  # from the run's start
    kept = [line for line in out.stdout.splitlines() if "warm for the next run" in line]
    assert kept and kept[0].startswith(
        f"info (recorded at {seconds // 60:02d}:{seconds % 60:02d}): kept 4 verifier workers"
    )
    assert not [line for line in out.stdout.splitlines() if line.startswith("info: ")]
