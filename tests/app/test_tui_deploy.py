"""The Deploy tab (key 6) and the d key: the selected attempt's kernel put into a model by
`kernelladder deploy` in a child process, followed in the tab without blocking the
screen, recorded in the run's log; a deploy the log already holds shown from the fold.

The recorded result in tests/data/deploy is real: `kernelladder deploy
examples/cpu-rmsnorm-run --json --no-record` on the CPU (Triton's interpreter)."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, replay_app, saved_run, until

from kernelladder.app.widgets.deploy_view import NOT_YET, DeployView, deploy_content
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.deploy.record import record
from kernelladder.engine.record.log import read_events

RESULT = ROOT / "tests" / "data" / "deploy" / "cpu-rmsnorm-llama-tiny.json"


def deploy_text(app) -> str:
    return str(app.main.query_one(DeployView).query_one("#deploy-text").render())


async def select(pilot, app, attempt: int) -> None:
    await until(lambda: bool(app.main.query(StrategyTree)), "the tree", pilot=pilot)
    tree = app.main.query_one(StrategyTree)
    await until(lambda: tree.select_attempt(attempt), f"#{attempt} in the tree", pilot=pilot)
    await until(lambda: app.main.selected_attempt == attempt, f"#{attempt} selected", pilot=pilot)


def test_the_tab_says_how_to_deploy_an_attempt_never_deployed():
    assert NOT_YET.format(n=4) in str(deploy_content(4, ()))
    running = str(deploy_content(4, (), running="checking: the unpatched model"))
    assert "deploying #4 now: checking: the unpatched model" in running
    assert "no attempt selected" in str(deploy_content(None, ()))


async def test_a_deploy_the_log_holds_is_shown_in_the_deploy_tab(tmp_path):
    run = saved_run(tmp_path)
    done = record(str(run), json.loads(RESULT.read_text()))
    assert done.seq is not None
    app = replay_app(run)
    async with app.run_test(size=(140, 44)) as pilot:
        await select(pilot, app, 1)
        await pilot.press("6")
        await until(lambda: "MATCH (event" in deploy_text(app), "the recorded deploy", pilot=pilot)
        text = deploy_text(app)
        assert f"MATCH (event #{done.seq}): rmsnorm #1" in text
        assert "check: MATCH" in text and "speed: not measured: no GPU" in text
        await select(pilot, app, 2)
        await until(lambda: NOT_YET.format(n=2)[:30] in deploy_text(app), "#2's", pilot=pilot)


async def test_d_deploys_the_selected_attempt_in_a_worker_and_the_tab_follows_it(tmp_path):
    pytest.importorskip("transformers")
    run = saved_run(tmp_path)
    count = len(read_events(run))
    app = replay_app(run)
    async with app.run_test(size=(140, 44)) as pilot:
        await select(pilot, app, 3)
        await pilot.press("d")
        await until(lambda: app.deploys.running, "the deploy to start", pilot=pilot)
        assert app.main.query_one("AttemptPanel").active == "tab-deploy"
        assert "deploying #3 now" in deploy_text(app)
        # the screen goes on answering keys while the child process works (it loads torch
        # and transformers for seconds before its first line)
        await pilot.press("2")
        assert app.main.query_one("AttemptPanel").active == "tab-verdict"
        assert app.deploys.running == {3: app.deploys.running[3]}
        await pilot.press("d")  # one at a time: the second press starts nothing
        assert list(app.deploys.running) == [3]
        await pilot.press("6")
        await until(lambda: not app.deploys.running, "the deploy to end", timeout=240, pilot=pilot)
        assert not app.deploys.failed, app.deploys.failed
        await until(lambda: "MATCH (event" in deploy_text(app), "its result", pilot=pilot)
        assert f"MATCH (event #{count}): rmsnorm #3, passed in llama-3-8b" in deploy_text(app)
    events = read_events(run)
    assert len(events) == count + 1 and events[-1].kind == "deploy_checked"
    assert events[-1].attempt == 3


async def test_a_deploy_that_fails_before_a_result_says_why_in_the_tab(tmp_path):
    """The child stops with its one line (here: the run's meta.json is damaged, so it
    cannot tell the op): the toast and the tab say it; nothing is recorded."""
    run = saved_run(tmp_path)
    (run / "meta.json").write_text("{}")
    app = replay_app(run)
    count = len(read_events(run))
    async with app.run_test(size=(140, 44)) as pilot:
        await select(pilot, app, 3)
        await pilot.press("d")
        await until(lambda: 3 in app.deploys.failed, "the failure", timeout=60, pilot=pilot)
        assert "meta.json has no usable op" in app.deploys.failed[3]
        await until(lambda: "the deploy of #3 failed" in deploy_text(app), "the line", pilot=pilot)
    assert len(read_events(run)) == count
