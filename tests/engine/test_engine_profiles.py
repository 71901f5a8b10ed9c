"""When a run profiles: the start (attempt #0), each new best, and what it does when ncu
cannot read the counters.

Doubles, and why: this machine has no GPU and no Nsight Compute, so the runner is the
scripted one (tests/helpers.py) and `profile_candidate` / `availability` are
replaced by functions returning what the real ones return on the H200: the summary of a
real report captured there (tests/data/ncu). The real profile plumbing is tested in
test_ncu_profile_summary.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import DATA, ScriptedProposer, make_run, move, scripted_op, until

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.verifier.host import profile as profile_mod

NCU = DATA / "ncu"


def _summary():
    return profile_mod.summarize(
        (NCU / "rmsnorm_details.csv").read_text(), (NCU / "rmsnorm_raw.csv").read_text()
    )


@pytest.fixture
def profiled(monkeypatch):
    calls: list[str] = []

    async def fake_profile(op_wire, source, out_dir, name, timeout_s=300.0, **holds):
        calls.append(name)
        report = Path(out_dir) / f"{name}.ncu-rep"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_bytes(b"report")
        return profile_mod.ProfileOutcome("ok", summary=_summary(), report=str(report))

    monkeypatch.setattr(profile_mod, "availability", lambda *a, **k: (True, "ncu (double)"))
    monkeypatch.setattr(profile_mod, "profile_candidate_async", fake_profile)
    return calls


def _own_kernel_op():
    return replace(scripted_op(), start_label="your kernel (kernel.py)")


def _run(tmp_path, moves, proposer=None, **options):
    from kernelladder.engine import create_run
    from kernelladder.engine.run.options import RunOptions

    run, runner, scripted = make_run(tmp_path, moves, **options)
    proposer = proposer or scripted
    opts = RunOptions(**{**run.options.to_dict(), "run_dir": str(tmp_path / "own")})
    own = create_run(opts, runner=runner, proposer=proposer, op=_own_kernel_op())
    return own, proposer


async def test_the_start_and_each_new_best_are_profiled(tmp_path, profiled):
    moves = [move("pass 1.5"), move("pass 1.1"), move("pass 1.8"), move("fail correctness")]
    run, proposer = _run(tmp_path, moves, max_attempts=5)
    await run.run()
    events = read_events(run.run_dir)
    ready = [e for e in events if isinstance(e, ev.ProfileReady)]
    assert [(e.attempt, e.reason) for e in ready] == [
        (0, "the start"), (1, "new best"), (3, "new best"),
    ]  # fmt: skip
    assert profiled == ["0", "1", "3"]
    assert all(e.status == "ok" and e.report == f"profiles/{e.attempt}.ncu-rep" for e in ready)
    assert ready[0].summary["dram_pct"] == 85.82
    # the proposer gets its parent's profile (the start's first, then the best's)
    assert proposer.contexts[0].parent_attempt == 0
    assert proposer.contexts[0].profile == _summary().to_dict()
    assert run.state.profiles[3]["summary"]["kernel"] == "rmsnorm_rows"


async def test_counters_blocked_is_said_once_and_the_run_goes_on(tmp_path, monkeypatch):
    calls: list[str] = []

    async def blocked(op_wire, source, out_dir, name, timeout_s=300.0, **holds):
        calls.append(name)
        return profile_mod.ProfileOutcome(
            "unavailable", "ncu cannot read the GPU's counters (ERR_NVGPUCTRPERM)"
        )

    monkeypatch.setattr(profile_mod, "availability", lambda *a, **k: (True, "ncu (double)"))
    monkeypatch.setattr(profile_mod, "profile_candidate_async", blocked)
    run, _ = _run(tmp_path, [move("pass 1.5"), move("pass 1.8")], max_attempts=3)
    state = await run.run()
    assert calls == ["0"]  # never asked again
    notices = [n.message for n in state.notices if "profiling off" in n.message]
    assert notices == ["profiling off: ncu cannot read the GPU's counters (ERR_NVGPUCTRPERM)"]
    assert state.judged == 3


async def test_no_ncu_is_said_at_the_start(tmp_path, monkeypatch):
    monkeypatch.setattr(
        profile_mod, "availability", lambda *a, **k: (False, "Nsight Compute (ncu) not found")
    )
    run, _ = _run(tmp_path, [move("pass 1.5")], max_attempts=2)
    state = await run.run()
    assert [n.message for n in state.notices if "profiling" in n.message] == [
        "profiling off: Nsight Compute (ncu) not found"
    ]
    assert not state.profiles


async def test_profile_off(tmp_path, profiled):
    run, _ = _run(tmp_path, [move("pass 1.5")], max_attempts=2, profile="off")
    state = await run.run()
    assert profiled == [] and not state.profiles


class AfterTheRunsBest(ScriptedProposer):
    """b2 proposes only once b1's 2.0x is the run's best, so b2's 1.2x is a branch
    best that is not the run's (not profiled as a new best)."""

    async def propose(self, ctx):
        if ctx.branch_id == "b2":
            await until(
                    lambda: any(c.branch_id == "b1" and c.parent_attempt not in (None, 0)
                                for c in self.contexts),
                    what="b1's best",
                )  # fmt: skip
        return await super().propose(ctx)


def _stalling_run(tmp_path, **options):
    """b1 finds the run's best (2.0x); b2's best (1.2x) is then followed by three
    attempts without a gain: b2 stalls."""
    proposer = AfterTheRunsBest(
        {
            "b1": [move("pass 2.0"), move("pass 1.0")],
            "b2": [move("pass 1.2"), move("pass 1.0"), move("pass 1.0"), move("pass 1.0")],
        }
    )
    run, _ = _run(tmp_path, [], proposer, max_attempts=10, branches=2, **options)
    return run


async def test_a_stalled_branch_has_its_best_profiled(tmp_path, profiled):
    state = await _stalling_run(tmp_path).run()
    reasons = {n: p["reason"] for n, p in state.profiles.items()}
    b2_best = state.branches["b2"].best_attempt
    assert reasons[0] == "the start"
    assert reasons[state.best_attempt] == "new best"
    assert reasons[b2_best] == "branch stalled"
    assert len(reasons) == 3


async def test_a_stalled_branch_s_profile_that_would_land_too_late_is_skipped(
    tmp_path, monkeypatch
):
    """A profile takes 30 s here (ProfileReady.wall_s) and b2 judges an attempt every few
    milliseconds with one left before its stagnation stop (4): the profile would land
    after b2's last proposal, so it is not taken, and the log says why."""

    async def slow_profile(op_wire, source, out_dir, name, timeout_s=300.0, **holds):
        return profile_mod.ProfileOutcome("ok", summary=_summary(), report="", wall_s=30.0)

    monkeypatch.setattr(profile_mod, "availability", lambda *a, **k: (True, "ncu (double)"))
    monkeypatch.setattr(profile_mod, "profile_candidate_async", slow_profile)
    state = await _stalling_run(tmp_path, stagnation=4).run()
    b2_best = state.branches["b2"].best_attempt
    reasons = {n: p["reason"] for n, p in state.profiles.items()}
    assert b2_best not in reasons and reasons[state.best_attempt] == "new best"
    assert state.profiles[0]["wall_s"] == 30.0  # what the decision read
    [skipped] = [n.message for n in state.notices if "skipped" in n.message]
    assert skipped.startswith(f"profile of #{b2_best} (branch stalled) skipped: it would land ")
    assert "a profile takes about 30 s" in skipped


@pytest.mark.parametrize(
    ("left", "walls", "gaps", "late"),
    [
        # figures of this branch-stalled profile decision on the H200 (2026-12-02 logs)
        (3, [11.0, 11.0], [2.3, 2.2, 2.4], True),  # kv_quant #19: none of b3's read it
        (1, [11.0], [3.2, 3.1], True),  # softmax #11: its branch stopped first
        (3, [14.0, 14.0], [4.7, 4.6, 4.8], False),  # kv_quant #5: read by six
        (5, [9.0], [4.0, 4.1], False),  # rmsnorm #12: read by three
        (3, [], [2.0, 2.0], False),  # no profile's wall yet: profile
        (3, [11.0], [2.0], False),  # one gap: too few figures to tell
        (1 << 30, [11.0], [0.1, 0.1], False),  # no stagnation stop, no max-attempts
    ],
)
def test_profile_lands_late(left, walls, gaps, late):
    from kernelladder.engine.run.profiling import profile_lands_late

    assert bool(profile_lands_late(left, walls, gaps)) is late


async def test_a_new_best_within_the_noise_is_not_profiled_and_the_log_says_why(tmp_path, profiled):
    moves = [move("pass 1.5"), move("pass 1.505"), move("pass 1.9")]
    run, _ = _run(tmp_path, moves, max_attempts=4)
    state = await run.run()
    assert profiled == ["0", "1", "3"]
    skipped = [n.message for n in state.notices if "skipped" in n.message]
    assert skipped == ["profile of #2 skipped: a new best within the noise of #1, profiled already"]
    assert state.best_attempt == 3


@pytest.fixture
def held_profiles(monkeypatch):
    """Profiles that finish only when the test lets them (ncu's 8-9 s on the H200)."""
    release = {}
    calls: list[str] = []

    async def held(op_wire, source, out_dir, name, timeout_s=300.0, **holds):
        import asyncio

        calls.append(name)
        if name != "0":  # the start's profile is waited for: let it through
            release[name] = asyncio.Event()
            await release[name].wait()
        report = Path(out_dir) / f"{name}.ncu-rep"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_bytes(b"report")
        return profile_mod.ProfileOutcome("ok", summary=_summary(), report=str(report))

    monkeypatch.setattr(profile_mod, "availability", lambda *a, **k: (True, "ncu (double)"))
    monkeypatch.setattr(profile_mod, "profile_candidate_async", held)
    return calls, release


async def test_a_new_best_is_profiled_beside_its_branch_and_the_end_waits_for_it(
    tmp_path, held_profiles
):
    import asyncio

    calls, release = held_profiles
    moves = [move("pass 1.5"), move("pass 1.0"), move("pass 1.0"), move("pass 1.0")]
    run, proposer = _run(tmp_path, moves, max_attempts=5)
    task = asyncio.ensure_future(run.run())
    # #1 is a new best, profiled; the branch goes on to #2, #3 and #4 while it is held
    await until(lambda: run.state.judged == 5, what="every attempt judged")
    assert calls == ["0", "1"] and 1 not in run.state.profiles
    assert not task.done()  # the run's end waits for the profile in flight
    release["1"].set()
    state = await task
    assert state.profiles[1]["reason"] == "new best"
    events = read_events(run.run_dir)
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ProfileReady", kinds.index("ProfileReady") + 1) < kinds.index("RunFinished")
    # the proposals asked for while it was held had the start's profile, not #1's
    assert all(c.parent_attempt in (0, 1) for c in proposer.contexts)


async def test_a_forced_stop_cancels_a_profile_in_flight(tmp_path, held_profiles):
    import asyncio

    calls, _ = held_profiles
    run, _ = _run(tmp_path, [move("pass 1.5"), move("pass 1.0")], max_attempts=10)
    task = asyncio.ensure_future(run.run())
    await until(lambda: "1" in calls, what="#1's profile asked for")
    await run.stop("user", cancel=True)
    state = await asyncio.wait_for(task, 10)
    assert state.finished and 1 not in state.profiles


async def test_a_forced_stop_at_the_end_cancels_the_profile_it_waits_for(tmp_path, held_profiles):
    """The branches run dry while #1's profile is held: the run's end waits for it, and a
    forced stop that comes then still cancels it (it once waited out the profile)."""
    import asyncio

    calls, _ = held_profiles
    run, _ = _run(tmp_path, [move("pass 1.5"), move("pass 1.0")], max_attempts=10)
    task = asyncio.ensure_future(run.run())
    await until(lambda: "1" in calls, what="#1's profile asked for")
    await until(
        lambda: run.state.branches and all(b.closed for b in run.state.branches.values()),
        what="every branch run dry",
    )
    await asyncio.sleep(0.2)  # the end reaches its wait for the profile
    assert not task.done()
    await run.stop("user", cancel=True)
    state = await asyncio.wait_for(task, 30)
    assert state.finished and 1 not in state.profiles
