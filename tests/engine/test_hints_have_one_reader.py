"""Hints are read by one reader with the op's vocabulary (engine/run/hints.py): the editor,
the steering commands, the search and the gate re-check agree, so a line the editor
rejects has no effect anywhere, and a branch's hints touch only that branch's gates.

The run is the real engine with the real `search` proposer on attention (whose families
and parameters are the vocabulary, and whose seven lines let three branches wait at a
gate at once), its verdicts from the ScriptedRunner double (no GPU here; helpers.py)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import cpu_search_app, until

from kernelladder.engine.proposers.search_steering import steering
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.run.hints import op_vocabulary, read_hints, refusal
from kernelladder.ops.registry import catalog


async def three_gates(run) -> asyncio.Task:
    task = asyncio.ensure_future(run.run())
    await until(lambda: len(run.state.pending_gates) == 3, "three gates", 15)
    return task


def person_events(run) -> list[ev.Event]:
    return [e for e in read_events(run.run_dir) if getattr(e, "by", None) in ("user", "hints")]


async def test_a_line_the_editor_rejects_is_refused_and_vetoes_nothing(tmp_path):
    """Before: `fix ROWS=3` (rmsnorm's ROWS takes 1, 2, 4, 8, 16) was recorded and the
    engine, reading it without the op's vocabulary, vetoed g2 and g3 with it."""
    _, run = cpu_search_app(tmp_path, op="attention")
    task = await three_gates(run)
    try:
        with pytest.raises(
            ValueError, match=r"not understood: fix BLOCK_M=3 \(BLOCK_M takes one of"
        ):
            await run.edit_hints("fix BLOCK_M=3")
        assert person_events(run) == [] and len(run.state.pending_gates) == 3
    finally:
        await run.stop()
        await asyncio.wait_for(task, 10)


async def test_a_branchs_hints_recheck_only_that_branchs_gates(tmp_path):
    """Before: editing b1's hints re-checked every pending gate against its own hints: an
    old log's global `fix ROWS=3` (read without the vocabulary) vetoed b2's and b3's
    gates with that note."""
    # as a run recorded before the one reader: a global hint it would refuse today
    _, run = cpu_search_app(tmp_path, op="attention", hints="fix BLOCK_M=3")
    task = await three_gates(run)
    try:
        await run.edit_hints("try BLOCK_N=64", branch_id="b1")
        kinds = [(e.kind, getattr(e, "branch_id", None)) for e in person_events(run)]
        assert kinds == [("hint_edited", "b1")], kinds
        assert set(run.state.pending_gates) == {"g1", "g2", "g3"}
    finally:
        await run.stop()
        await asyncio.wait_for(task, 10)


async def test_unchanged_hints_are_not_recorded_again(tmp_path):
    _, run = cpu_search_app(tmp_path, op="attention")
    task = await three_gates(run)
    try:
        await run.edit_hints("keep the rows short")
        with pytest.raises(ValueError, match="the hints are unchanged"):
            await run.edit_hints("keep the rows short")
        assert [e.kind for e in person_events(run)] == ["hint_edited"]
    finally:
        await run.stop()
        await asyncio.wait_for(task, 10)


def test_the_search_and_the_engine_read_a_hint_alike():
    """The search's steering and the engine's reader give the same directives."""
    from types import SimpleNamespace

    text = "fix ROWS=3\nfix ROWS=4\navoid two-pass\nprefer warp-shuffle\nkeep it short"
    ctx = SimpleNamespace(
        hints=text, vetoed_families=(), closed_families=(), stagnation_limit=0, stagnation=0,
        history=[], device="cpu",
    )  # fmt: skip
    steer = steering(ctx, catalog()["rmsnorm"])
    read = read_hints(text, op_vocabulary("rmsnorm"))
    assert dict(steer.fixed) == read.fixed == {"ROWS": "4"}
    assert steer.closed == read.avoided_families == {"two-pass"}
    assert refusal(text, op_vocabulary("rmsnorm")).startswith(
        "not understood: fix ROWS=3 (ROWS takes one of 1, 2, 4, 8, 16) (and 1 more)"
    )
    # an op without search templates reads directives by their form alone
    assert refusal("fix ROWS=3", op_vocabulary("my_workspace_op")) is None
