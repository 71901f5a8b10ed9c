"""The headless view of a run someone steers from an attached app: a gate decided in the
app ends the question on the terminal (the view goes on updating), and a run stopped
from the app ends with its `finished:` line.

The run is the real engine with its real control channel; the app's side is
AttachedRun, as `kernelladder-tui --attach` sends commands. Runner and proposer are the
engine tests' doubles (no GPU or model here); stdin is a pipe nobody writes to: the
person at the terminal does not answer."""

from __future__ import annotations

import asyncio
import io
import os

import pytest
from helpers import HeldProposer, ScriptedRunner, move, scripted_op, until

from kernelladder.app.attach import AttachedRun
from kernelladder.app.headless import HeadlessView
from kernelladder.engine import create_run
from kernelladder.engine.run.control import read_owner
from kernelladder.engine.run.options import RunOptions


def gated_run(tmp_path):
    proposer = HeldProposer({"b1": [move("pass 1.4", "two-pass", undo="high")]})
    options = RunOptions(
        op="scripted", proposer="scripted", branches=1, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=20, stagnation=20,
    )  # fmt: skip
    return create_run(options, runner=ScriptedRunner(), proposer=proposer, op=scripted_op())


@pytest.mark.parametrize("live", [False, True], ids=["plain", "live-panel"])
async def test_headless_view_follows_a_gate_and_a_stop_from_an_attached_app(tmp_path, live):
    run = gated_run(tmp_path)
    read_fd, write_fd = os.pipe()
    out = io.StringIO()
    with os.fdopen(read_fd) as stdin:
        view = HeadlessView(run, stream=out, live=live, prompt_gates=True, stdin=stdin)
        follower = asyncio.ensure_future(view.follow())
        task = asyncio.ensure_future(run.run())
        await until(lambda: read_owner(run.run_dir) is not None, "the control channel")
        await until(lambda: "approve or veto?" in out.getvalue(), "the question on the terminal")
        app_side = AttachedRun(run.run_dir)
        await app_side.approve("g1")
        # the question is withdrawn: nobody typed, the view is free to update again
        await until(lambda: view._asking is None, "the question ended", timeout=3)
        assert "approve (user)" in out.getvalue()
        await app_side.stop()
        await asyncio.wait_for(task, 10)
        await asyncio.wait_for(follower, 10)
        await app_side.client.close()
    os.close(write_fd)
    lines = out.getvalue().splitlines()
    assert any(line.lstrip().startswith("finished: user-stop") for line in lines), lines
    # the decision made elsewhere stands on its own line, not after the unanswered question
    assert not any("[a/v]" in line and "approve (" in line for line in lines), lines
    assert any(line.rstrip().endswith("approve or veto? [a/v]") for line in lines), lines
