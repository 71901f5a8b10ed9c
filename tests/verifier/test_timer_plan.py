"""The GPU timer's plan: a call timed again (round after round, or after its first look)
is probed once -- the host's enqueue time and a trial's length -- and then only timed.

No GPU here: GpuTimer's CUDA parts (the flush buffer, events, synchronize) are replaced
by a recorder of what it would launch; the planning logic under test is the real one."""

from __future__ import annotations

from kernelladder.verifier import timing
from kernelladder.verifier.paired_rounds import time_rounds


class RecordingTimer(timing.GpuTimer):
    """GpuTimer without CUDA: each _measure call is recorded, trials last `ms` each."""

    def __init__(self, ms: dict[str, float], enqueue_ms: float = 0.02) -> None:
        self.device = "cuda"  # no flush buffer, no events
        self._rates = None
        self.flush_ms = 0.05
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


def _old_trial_count(timer: RecordingTimer, cand_ms: float, target_ms: float) -> int:
    """The trials a target held when every trial slept 2x the host's enqueue + 20 us."""
    import statistics

    host = []
    for _ in range(3):
        t0 = timing.TRUSTED.perf_counter()
        host.append((timing.TRUSTED.perf_counter() - t0) * 1e3)
    sleep_ms = 2.0 * statistics.median(host) + 0.02
    per_trial = cand_ms + timer.flush_ms + sleep_ms
    return int(min(timing.MAX_TRIALS, max(timing.MIN_TRIALS, target_ms / per_trial)))


def test_a_flush_and_call_that_outlast_the_enqueue_sleep_once_not_before_each_trial():
    # flush 0.05 + call 0.45 ms against 0.02 ms of enqueueing: the host stays ahead
    timer = RecordingTimer({"cand": 0.45}, enqueue_ms=0.02)
    plan: dict = {}
    t = timer.time_planned(lambda: "cand", 100.0, plan)
    assert plan["sleep_cycles"] == 0 and plan["lead_cycles"] > 0
    probe, timed = timer.measured
    assert probe[2] > 0 and timer.leads[0] == 0  # the probe still sleeps before each trial
    assert timed[2] == 0 and timer.leads[1] == plan["lead_cycles"]
    # as many trials as when every trial slept (within one: the host's enqueue was timed)
    assert abs(t.trials - _old_trial_count(timer, 0.45, 100.0)) <= 1


def test_a_slow_enqueue_sleeps_before_each_trial_for_what_the_flush_and_call_do_not_cover():
    # 0.2 ms of host work per trial against 0.05 + 0.004 ms of GPU work
    timer = RecordingTimer({"cand": 0.004}, enqueue_ms=0.2)
    plan: dict = {}
    timer.time_planned(lambda: "cand", 20.0, plan)
    short_ms = timing.LEAD_MARGIN * 0.2 - (0.05 + 0.004)
    assert plan["sleep_cycles"] == int(short_ms * timing.SLEEP_CYCLES_PER_MS)
    assert plan["lead_cycles"] > 0


def test_the_sleeps_are_bounded():
    timer = RecordingTimer({"cand": 0.001}, enqueue_ms=50.0)
    plan: dict = {}
    timer.time_planned(lambda: "cand", 20.0, plan)
    assert plan["sleep_cycles"] <= timing.MAX_SLEEP_CYCLES
    assert plan["lead_cycles"] <= timing.MAX_SLEEP_CYCLES
