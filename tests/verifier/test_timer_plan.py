"""The GPU timer's plan: a call timed again (round after round, or after its first look)
is probed once -- the host's enqueue time and a trial's length -- and then only timed.

No GPU here: GpuTimer's CUDA parts (the flush buffer, events, synchronize) are replaced
by a recorder of what it would launch; the planning logic under test is the real one."""

from __future__ import annotations

import dataclasses

from kernelladder.verifier.worker import timing
from kernelladder.verifier.worker.paired_rounds import time_rounds


class RecordingTimer(timing.GpuTimer):
    """GpuTimer without CUDA: each _measure call is recorded, trials last `ms` each."""

    def __init__(self, ms: dict[str, float], enqueue_ms: float = 0.02) -> None:
        self.device = "cuda"  # no flush buffer, no events
        self._rates = None
        self.flush_ms = 0.05
        self.flush_bytes = timing.COUNTED_FLUSH_BYTES
        self.gap_ms = timing.TRIAL_GAP_MS  # GpuTimer's default
        self.enqueue_ms = 0.0
        self.ms = ms
        self.enqueue_ms_of_a_trial = enqueue_ms  # what the host takes per trial
        self.measured: list[tuple[str, int, int]] = []  # (function, trials, sleep cycles)
        self.leads: list[int] = []  # the lead sleep of each _measure

    def _sync(self) -> None:
        pass

    def _measure(self, fn, trials, sleep_cycles=0, lead_cycles=0):
        name = fn()
        self.measured.append((name, trials, sleep_cycles))
        self.leads.append(lead_cycles)
        self.enqueue_ms = self.enqueue_ms_of_a_trial
        return [self.ms[name]] * trials


def test_an_empty_plan_is_filled_and_a_filled_one_skips_the_probe():
    timer = RecordingTimer({"cand": 0.45})
    plan: dict = {}
    first = timer.time_planned(lambda: "cand", 10.0, plan)
    assert [t for _, t, _ in timer.measured] == [3, first.trials]  # the probe, then trials
    assert {"sleep_cycles", "lead_cycles", "per_trial_ms"} <= set(plan)
    timer.measured.clear()
    again = timer.time_planned(lambda: "cand", 10.0, plan)
    assert [t for _, t, _ in timer.measured] == [first.trials]  # no probe
    assert again.trials == first.trials and again.median_ms == first.median_ms
    assert timer.measured[0][2] == plan["sleep_cycles"]
    # a longer target from the same plan: more trials, still no probe
    timer.measured.clear()
    longer = timer.time_planned(lambda: "cand", 80.0, plan)
    assert [t for _, t, _ in timer.measured] == [longer.trials] and longer.trials > first.trials


def test_plain_time_probes_every_call():
    timer = RecordingTimer({"cand": 0.45})
    timer.time(lambda: "cand", 10.0)
    timer.time(lambda: "cand", 10.0)
    assert [t for _, t, _ in timer.measured].count(3) == 2


def test_rounds_probe_each_side_once_and_reuse_the_first_looks_plan():
    timer = RecordingTimer({"cand": 0.45, "rival": 0.5})
    look_plan: dict = {}
    timer.time_planned(lambda: "cand", 20.0, look_plan)  # the first look
    timer.measured.clear()
    last: list = [None, 0]
    out = time_rounds(
        timer,
        lambda: "cand",
        lambda: "rival",
        7,
        lambda: _null(),
        last,
        candidate_plan=look_plan,
    )
    assert len(out.candidate_ms) == len(out.rival_ms) == 7
    probes = [(name, t) for name, t, _ in timer.measured if t == 3]
    assert probes == [("rival", 3)]  # the candidate's plan came from its first look
    assert sum(1 for name, _, _ in timer.measured if name == "cand") == 7
    assert sum(1 for name, _, _ in timer.measured if name == "rival") == 8


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_without_a_gap_each_trial_sleeps_twice_the_enqueue_and_no_lead():
    timer = RecordingTimer({"cand": 0.45})
    timer.gap_ms = None  # the timer until 2026-12-03
    plan: dict = {}
    timer.time_planned(lambda: "cand", 100.0, plan)
    probe, timed = timer.measured
    assert plan["lead_cycles"] == 0 and timer.leads == [0, 0]
    assert timed[2] == probe[2] == plan["sleep_cycles"] > 0


def test_a_smaller_flush_leaves_the_trial_count_as_it_was(monkeypatch):
    """The count is of trials as they were timed with a COUNTED_FLUSH_BYTES flush: a flush
    half that size (half the time) holds as many trials, not more. The host's enqueue
    time of the call, which the sleep is planned from, is read from a clock that ticks
    1 us a reading: on a loaded machine the real one gave the two timers different
    sleeps (830 and 832 trials)."""
    ticks = iter(range(10**6))
    clock = dataclasses.replace(timing.TRUSTED, perf_counter=lambda: next(ticks) * 1e-6)
    monkeypatch.setattr(timing, "TRUSTED", clock)
    full = RecordingTimer({"cand": 0.01})
    full.flush_ms, full.flush_bytes = 0.09, timing.COUNTED_FLUSH_BYTES
    half = RecordingTimer({"cand": 0.01})
    half.flush_ms, half.flush_bytes = 0.045, timing.COUNTED_FLUSH_BYTES // 2
    a = full.time_planned(lambda: "cand", 100.0, {})
    b = half.time_planned(lambda: "cand", 100.0, {})
    assert a.trials == b.trials


def test_a_fixed_gap_where_the_host_stays_ahead_after_one_lead_sleep():
    # flush 0.05 + call 0.45 ms against 0.02 ms of enqueueing: the host stays ahead
    timer = RecordingTimer({"cand": 0.45}, enqueue_ms=0.02)
    timer.gap_ms = 0.01
    plan: dict = {}
    timer.time_planned(lambda: "cand", 100.0, plan)
    probe, timed = timer.measured
    assert probe[2] > timed[2] == int(0.01 * timing.SLEEP_CYCLES_PER_MS)
    assert timer.leads == [0, plan["lead_cycles"]] and plan["lead_cycles"] > 0


def test_a_slow_enqueue_lengthens_the_gap_to_what_the_flush_and_call_do_not_cover():
    # 0.2 ms of host work per trial against 0.05 + 0.004 ms of GPU work
    timer = RecordingTimer({"cand": 0.004}, enqueue_ms=0.2)
    timer.gap_ms = 0.01
    plan: dict = {}
    timer.time_planned(lambda: "cand", 20.0, plan)
    short_ms = timing.LEAD_MARGIN * 0.2 - (0.05 + 0.004)
    assert plan["sleep_cycles"] == int(short_ms * timing.SLEEP_CYCLES_PER_MS)


def test_the_sleeps_are_bounded():
    timer = RecordingTimer({"cand": 0.001}, enqueue_ms=50.0)
    timer.gap_ms = 0.01
    plan: dict = {}
    timer.time_planned(lambda: "cand", 20.0, plan)
    assert plan["sleep_cycles"] <= timing.MAX_SLEEP_CYCLES
    assert plan["lead_cycles"] <= timing.MAX_SLEEP_CYCLES


def test_the_flush_is_twice_the_l2_within_its_bounds():
    assert timing.flush_bytes_for(60 * 2**20) == 120 * 2**20  # the H200
    assert timing.flush_bytes_for(4 * 2**20) == timing.MIN_FLUSH_BYTES
    assert timing.flush_bytes_for(200 * 2**20) == timing.COUNTED_FLUSH_BYTES
    assert timing.flush_bytes_for(None) == timing.COUNTED_FLUSH_BYTES
