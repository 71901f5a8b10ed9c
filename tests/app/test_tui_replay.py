"""Replay: the saved log, played in the same app, ends on the same screen as the live
run that wrote it; play, pause, steps and jumps; steering is off and says so; a
10,000-event log opens and jumps to its end in under a second.

The live run is the real engine with the engine tests' scripted runner and a held
proposer (test doubles: no GPU and no model here; see helpers.py).
"""

from __future__ import annotations

import time
from dataclasses import replace

from helpers import SIZE, live_app, logged, ready, until

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.replay import ReplayController, load_events
from kernelladder.app.scripted import demo_script
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events


def stamped(script, t0: float = 1_700_000_000.0, step: float = 0.05):
    return [replace(e, seq=i, ts=t0 + i * step) for i, e in enumerate(script)]


async def test_replay_ends_on_the_live_screen(tmp_path):
    app, run = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app, run)
        await pilot.press("h", *"prefer wide rows", "ctrl+s")
        await until(lambda: logged(run, ev.HintEdited), "hint recorded", pilot=pilot)
        await pilot.press("a")  # approve g1: #3 gets verified
        await until(lambda: app.main.view.attempts.get(3) is not None
                    and app.main.view.attempts[3].state == "judged", "#3 judged", pilot=pilot)  # fmt: skip
        await pilot.press("s", "y")
        await until(lambda: app.run_over, "the run finished", pilot=pilot)
        await pilot.pause(0.6)  # the chart redraws at 2 Hz
        app.main.query_one("SpeedupChart")._tick()
        live = app.main.screen_state()
        live_events = app.fold.folded
    assert live_events == len(read_events(run.run_dir))

    replay = KernelLadderApp(events=load_events(run.run_dir), run_dir=run.run_dir, frozen=True,
                             at_end=True)  # fmt: skip
    async with replay.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        replayed = replay.main.screen_state()
    assert replayed == live
    assert "hints" in live and live["hints"] == "prefer wide rows"
    assert "finished: user-stop" in live["header"]


async def test_replay_play_step_back_and_jump():
    events = stamped(demo_script())
    app = KernelLadderApp(events=events, frozen=True, speed=1.0)
    async with app.run_test(size=SIZE) as pilot:
        player = app.player
        await until(lambda: player.position > 0, "the replay to start playing", pilot=pilot)
        assert player.playing and 0 < player.position < len(events)  # plays at once
        await pilot.press("p")  # pause
        assert not player.playing
        at = player.position
        await pilot.press("full_stop")
        assert player.position == at + 1
        await pilot.press("comma", "comma")
        assert player.position == at - 1
        await pilot.press("G")
        assert player.position == len(events)
        assert app.main.view.events == len(events)
        assert app.main.screen_state()["gates"] == ["g1"]
        await pilot.press("home")
        assert player.position == 0 and app.main.screen_state()["tree"] == []
        await pilot.press("plus", "plus")
        assert player.speed == 4.0
        await pilot.press("minus")
        assert player.speed == 2.0


async def test_steering_is_off_in_a_replay_and_says_so():
    app = KernelLadderApp(events=stamped(demo_script()), frozen=True, at_end=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        for action in ("prune_branch", "approve_gate", "stop_run", "edit_hints"):
            assert app.main.check_action(action, ()) is None  # shown disabled in the footer
        await pilot.press("x", "a", "s", "h")
        assert app.screen is app.main and app.commands_sent == []
        await app.main.run_from_palette("approve_gate")
        await pilot.pause()
        assert any("replay" in n.message for n in app._notifications)
        # not steering: export and help still work in a replay
        assert app.main.check_action("export_best", ()) is True


def test_replay_controller_playback_follows_the_run_clock_with_gaps_shortened():
    events = stamped(demo_script(), step=0.5)
    events[10] = replace(events[10], ts=events[9].ts + 3600)  # an hour of silence
    for i in range(11, len(events)):
        events[i] = replace(events[i], ts=events[i].ts + 3600)
    player = ReplayController(events, speed=2.0)
    player.play()
    assert player.advance(0.1) == 1  # the first event at once, the second 0.5 s later
    player.advance(1.0)  # 2 s of run time at speed 2
    assert player.position == 5
    player.advance(2.5)  # the hour-long gap counts as MAX_GAP_S
    assert 10 <= player.position <= 12
    player.seek(len(events))
    assert player.at_end and player.advance(1.0) == len(events)


async def test_a_10000_event_replay_opens_and_jumps_to_the_end_in_under_a_second(tmp_path):
    script = demo_script(attempts=600, progress_lines=12)
    events = stamped(script[:10_000], step=0.001)
    assert len(events) == 10_000
    (tmp_path / "events.jsonl").write_text("".join(e.to_json() + "\n" for e in events))

    # CPU seconds of this process, not the wall clock: on a loaded machine the wall clock
    # counts other processes' turns (the wall-clock figure comes from bench/tui_load.py)
    cpu = time.process_time
    start = cpu()
    app = KernelLadderApp(events=load_events(tmp_path), run_dir=tmp_path, frozen=True,
                          at_end=True)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        while app.main.view.events < 10_000:
            await pilot.pause(0.01)
        opened = cpu() - start
        assert app.main.screen_state()["tree"]  # drawn
        print(f"open a 10,000-event replay at its end: {opened * 1000:.0f} ms of CPU")
        assert opened < 1.0

        await pilot.press("home")
        assert app.main.view.events == 0
        start = cpu()
        await pilot.press("G")
        jumped = cpu() - start
        print(f"jump from its start to its end: {jumped * 1000:.0f} ms of CPU")
        assert app.player.position == 10_000 and app.main.view.events == 10_000
        assert jumped < 1.0
        start = cpu()
        await pilot.press("comma")  # a step back folds again from the start
        assert cpu() - start < 1.0
        assert app.main.view.events == 9_999


async def test_a_replay_of_a_log_with_a_torn_last_line_says_the_run_was_killed(tmp_path):
    from helpers import saved_run

    from kernelladder.app.replay import TORN_ENDING, log_ending

    run_dir = saved_run(tmp_path)
    log = run_dir / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    # killed mid-write: no RunFinished, the last line cut short
    log.write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
    assert log_ending(run_dir) == TORN_ENDING
    app = KernelLadderApp(
        events=load_events(run_dir), run_dir=run_dir, frozen=True, at_end=True,
        log_ending=log_ending(run_dir),
    )  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        header = app.main.screen_state()["header"]
        assert TORN_ENDING in header and "running" not in header, header
        await pilot.press("home")  # earlier in the replay the run was running
        await pilot.pause(0.2)
        assert TORN_ENDING not in app.main.screen_state()["header"]
    finished = saved_run(tmp_path, "finished")
    assert log_ending(finished) == ""
