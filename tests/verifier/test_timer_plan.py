"""The GPU timer's plan: a call timed again (round after round, or after its first look)
is probed once -- the host's enqueue time and a trial's length -- and then only timed.

No GPU here: GpuTimer's CUDA parts (the flush buffer, events, synchronize) are replaced
by a recorder of what it would launch; the planning logic under test is the real one."""

from __future__ import annotations

from kernelladder.verifier import timing
from kernelladder.verifier.paired_rounds import time_rounds


class RecordingTimer(timing.GpuTimer):
    """GpuTimer without CUDA: each _measure call is recorded, trials last `ms` each."""

    def __init__(self, ms: dict[str, float]) -> None:  # no flush buffer, no events
        self.device = "cuda"
        self._rates = None
        self.flush_ms = 0.05
        self.ms = ms
        self.measured: list[tuple[str, int, int]] = []  # (function, trials, sleep cycles)

    def _sync(self) -> None:
        pass

    def _measure(self, fn, trials, sleep_cycles=0):
        name = fn()
        self.measured.append((name, trials, sleep_cycles))
        return [self.ms[name]] * trials


def test_an_empty_plan_is_filled_and_a_filled_one_skips_the_probe():
    timer = RecordingTimer({"cand": 0.45})
    plan: dict = {}
    first = timer.time_planned(lambda: "cand", 10.0, plan)
    assert [t for _, t, _ in timer.measured] == [3, first.trials]  # the probe, then trials
    assert set(plan) == {"sleep_cycles", "per_trial_ms"}
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
