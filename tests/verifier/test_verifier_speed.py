"""The speed gate's arithmetic and report, on a machine without a GPU.

Test double (says so): CUDA events cannot run here, so the GpuTimer is replaced by a
timer that returns the time each function takes by a fixed table (reference, library,
torch.compile, candidate), with measured "ceilings" of our choosing. Everything else is
the real verifier: real candidate calls through the Triton interpreter, real gates, real
geometric means, floors, min-speedup gate and the over-10x flag. Runs in a fresh
interpreter with the worker's interpreter patches, as the worker does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

PROBE = r"""
import itertools, json, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton

from kernelladder.verifier.worker import fence, interp_patch, poison
interp_patch.apply(); poison.setup_cpu_malloc(); fence.install_launch_counter()
from kernelladder.verifier.worker.gates import Verifier, VerifyOptions
from kernelladder.verifier.worker.timing import Timing
from kernelladder.ops.registry import get_op

CAND_MS = 1.0
TABLE = {"reference": 2.0, "F.rms_norm": 0.5, "torch.compile": 0.6}

class TableTimer:
    # Times by who is being timed: the candidate's kernel(), the reference, a baseline.
    # The candidate's times come from CAND_MS in turn (one value, or a list to cycle).
    def time(self, fn, target_ms=100.0):
        for _ in range(3):  # warm-up and trials, as the GPU timer calls it
            fn()
        code = getattr(fn, "__code__", None)
        names = (code.co_names + code.co_freevars) if code else ()
        if "call" in names:
            ms = next(CAND)
            CAND_TARGETS.append(target_ms)
        elif "reference" in names:
            ms = TABLE["reference"]
        elif getattr(fn, "baseline_name", "") == RIVAL_FAILS:
            raise RuntimeError("the baseline failed this time")
        else:
            ms = TABLE.get(getattr(fn, "baseline_name", ""), 0.55)
        return Timing(ms, 0.01, int(target_ms))  # trials: which target it was timed to
    def rates(self):
        return {"copy": 1e9, "fp32": 1e12}  # bytes/ms and ops/ms
    def floor_ms(self, nbytes, flops, unit):
        return max(nbytes / 1e9, flops / 1e12)

v = Verifier("cpu", tempfile.mkdtemp(), {}, timer=TableTimer())
def baseline_ms(spec, shape, inputs, refresh=False, before=None):  # name the baseline closures
    return {"F.rms_norm": TABLE["F.rms_norm"], "torch.compile": TABLE["torch.compile"]}
v.baseline_ms = baseline_ms
def named(name):
    fn = lambda: None
    fn.baseline_name = name
    return fn
v.baseline_fns = lambda spec, shape, inputs: {n: named(n) for n in TABLE if n != "reference"}
verdicts = []
CAND_TARGETS = []  # the targets the candidate was timed to, in the latest verification
for CAND_MS, min_speedup, path, *extra in json.loads(sys.argv[1]):
    CAND_TARGETS.clear()
    RIVAL_FAILS = CAND_MS.get("rival_fails") if isinstance(CAND_MS, dict) else None
    CAND_MS = CAND_MS["cand"] if isinstance(CAND_MS, dict) else CAND_MS
    CAND = itertools.cycle(CAND_MS if isinstance(CAND_MS, list) else [CAND_MS])
    src = open(path).read()
    extra = dict(extra[0]) if extra else {}
    if "best" in extra:  # the branch's best: its time at the largest shape, and elsewhere
        best, spec = extra.pop("best"), get_op("rmsnorm")
        largest = max(spec.cpu_shapes, key=spec.bytes_moved)
        extra["early_stop"] = {"attempt": best["attempt"], "noise": 0.01, "timings": {
            s.label: best["largest"] if s is largest else best["others"] for s in spec.cpu_shapes}}
    opts = VerifyOptions(op="rmsnorm", source=src, device="cpu", min_speedup=min_speedup, seeds=(0,),
                         **extra)
    verdicts.append({**v.verify(opts).verdict.to_dict(), "cand_targets": list(CAND_TARGETS)})
print(json.dumps(verdicts))
"""


CHEATS = ROOT / "tests" / "cheats"
HONEST = str(CHEATS / "honest_rmsnorm.py")
SCENARIOS = [
    (1.0, 1.0, HONEST, "pass", None),
    (1.0, 3.0, HONEST, "fail", "speed"),
    (0.04, 1.0, HONEST, "fail", "anti-cheat"),
    # a correct kernel at 0.9x the reference: a pass with optimize's min speedup 0 (its
    # standing says it is slower), a speed failure with check's 1.0
    (2.0 / 0.9, 0.0, HONEST, "pass", None),
    (2.0 / 0.9, 1.0, HONEST, "fail", "speed"),
]
# the end of a run re-measures its best: 15 rounds with the fastest baseline at every shape
REMEASURE = (1.0, 0.0, HONEST, {"paired_rounds": 15, "pair_every_shape": True})
# ... whose rounds stop once a shape's tie is settled, after at least 5: rounds that
# split (0.49 and 0.51 ms against 0.5) stop at 5; rounds all won (0.49) run all 15
SEQUENTIAL = {"paired_rounds": 15, "pair_every_shape": True, "paired_min_rounds": 5}
REMEASURE_SEQUENTIAL = [
    ([0.49, 0.51], 0.0, HONEST, SEQUENTIAL, "tie", 5),
    ([0.49], 0.0, HONEST, SEQUENTIAL, "faster", 15),
]


# Time where it decides something: the branch's best at the largest shape and elsewhere,
# the candidate's time (the same at every shape), and whether the timing stops early.
EARLY = [
    (1.2, {"attempt": 4, "largest": 1.0, "others": 1.0}, True),  # clearly slower everywhere
    (1.02, {"attempt": 4, "largest": 1.0, "others": 1.0}, False),  # inside the noise band
    (0.9, {"attempt": 4, "largest": 1.0, "others": 1.0}, False),  # faster: a new best?
    (1.2, {"attempt": 4, "largest": 1.0, "others": 1.5}, False),  # faster at the others
    # a tie at the largest shape (at the copy floor), 11 % slower at the others: the
    # geomean over the shapes is beyond the band
    (1.0, {"attempt": 4, "largest": 1.0, "others": 0.9}, True),
    # slower at the largest, a hair (inside the band) faster elsewhere: stops
    (1.2, {"attempt": 4, "largest": 1.0, "others": 1.21}, True),
]

# The fastest baseline (F.rms_norm, 0.5 ms) close to the candidate: the two are timed back
# to back in rounds, and the rounds decide. Candidate times cycle through the list.
PAIRED = [
    ([0.49], HONEST, "faster"),  # every round won
    ([0.52], HONEST, "slower"),  # every round lost
    ([0.49, 0.51], HONEST, "tie"),  # rounds split: a 2 % margin on one timing is not a win
    # the close baseline fails when timed again: no rounds, the plain comparison stands
    ({"cand": [0.49], "rival_fails": "F.rms_norm"}, HONEST, None),
    ([0.49], str(CHEATS / "late_timing_cache.py"), "anti-cheat"),
]
# a cheat that does no work once timed and rewrites every copy of its input it can reach
# (the last run of the probe)
ZEROES_WHEN_TIMED = ([0.49], 1.0, str(CHEATS / "zeroes_when_timed.py"))


# The pipelined path: a first look at each shape, then the rounds (close to the fastest
# baseline, F.rms_norm at 0.5 ms) or more trials (far from it), the candidate's time
# pooled from all; with the branch's best known, the early stop's looks count towards it.
PIPELINED = [
    (1.0, {}, "far"),  # 1.0 ms against 0.5: no rounds
    ([0.49], {}, "close"),  # within the band: 7 rounds back to back
    (1.02, {"best": {"attempt": 4, "largest": 1.0, "others": 1.0}}, "far"),  # looks reused
]


@pytest.fixture(scope="module")
def verdicts() -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = json.dumps(
        [s[:3] for s in SCENARIOS]
        + [(1.0, 1.0, str(CHEATS / "timing_cache.py"))]
        + [(cand, 1.0, path) for cand, path, _word in PAIRED]
        + [REMEASURE]
        + [(cand, 0.0, HONEST, {"best": best}) for cand, best, _stops in EARLY]
        + [(cand, 0.0, HONEST, {**extra, "pipeline": True}) for cand, extra, _kind in PIPELINED]
        + [r[:4] for r in REMEASURE_SEQUENTIAL]
        + [ZEROES_WHEN_TIMED]
    )
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE, runs],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index", range(len(SCENARIOS)))
def test_speed_gate(verdicts, index):
    cand_ms, _min_speedup, _source, status, gate = SCENARIOS[index]
    v = verdicts[index]
    assert v["verdict"] == status and v["gate"] == gate, v["gates"]
    assert v["speedup"] == pytest.approx(2.0 / cand_ms)
    assert v["speedup_vs"] == {
        "F.rms_norm": pytest.approx(0.5 / cand_ms),
        "torch.compile": pytest.approx(0.6 / cand_ms),
    }
    assert len(v["timings"]) == 3 and all(t["candidate_ms"] == cand_ms for t in v["timings"])
    largest = max(v["timings"], key=lambda t: t["floor_ms"])
    assert v["floor_fraction"] == pytest.approx(largest["floor_ms"] / cand_ms)
    speed = v["gates"]["speed"]
    assert speed["status"] == ("fail" if gate == "speed" else "pass")
    assert speed["evidence"]["per_shape"][0]["reference_ms"] == 2.0
    if gate == "anti-cheat":  # 0.5 / 0.04 = 12.5x over the best library baseline
        assert "speedup-over-10x-best-library" in v["flags"]
        assert "suspicious" in v["gates"]["anti-cheat"]["detail"]
    else:
        assert v["flags"] == []
    assert "time to beat" in v["feedback"]["expected"]


def test_timed_calls_must_be_the_checked_calls(verdicts):
    v = verdicts[len(SCENARIOS)]  # tests/cheats/timing_cache.py: caches once being timed
    assert (v["verdict"], v["gate"]) == ("fail", "anti-cheat"), v["gates"]
    assert v["gates"]["correctness"]["status"] == "pass"
    assert "behaves differently when timed" in v["gates"]["anti-cheat"]["detail"]
    assert "launched no Triton kernel" in v["gates"]["anti-cheat"]["detail"]


@pytest.mark.parametrize("index", range(len(PAIRED) - 2))
def test_a_close_baseline_is_timed_back_to_back(verdicts, index):
    from kernelladder.verifier.worker.gates import PAIRED_ROUNDS

    _cand, _path, word = PAIRED[index]
    v = verdicts[len(SCENARIOS) + 1 + index]
    assert v["verdict"] == "pass", v["gates"]
    for t in v["timings"]:
        paired = t["paired"]
        assert paired["baseline"] == "F.rms_norm" and paired["rounds"] == PAIRED_ROUNDS
        assert paired["verdict"] == word
        assert paired["won"] + paired["lost"] == PAIRED_ROUNDS
        assert paired["baseline_ms"] == 0.5
    assert v["gates"]["speed"]["evidence"]["per_shape"][0]["paired"]["verdict"] == word


def test_a_baseline_failing_in_the_rounds_leaves_the_plain_comparison(verdicts):
    v = verdicts[len(SCENARIOS) + len(PAIRED) - 1]
    assert v["verdict"] == "pass", v["gates"]
    assert all(t["paired"] is None for t in v["timings"])
    assert all(t["baselines_ms"]["F.rms_norm"] == 0.5 for t in v["timings"])


def test_a_distant_baseline_is_not_timed_again(verdicts):
    v = verdicts[0]  # 1.0 ms against 0.5 ms: no rounds needed to believe "slower"
    assert all(t["paired"] is None for t in v["timings"])


def test_the_back_to_back_calls_are_checked_too(verdicts):
    v = verdicts[len(SCENARIOS) + len(PAIRED)]  # honest until the rounds start, then caches
    assert (v["verdict"], v["gate"]) == ("fail", "anti-cheat"), v["gates"]
    assert "launched no Triton kernel" in v["gates"]["anti-cheat"]["detail"]


def test_timed_calls_are_checked_against_inputs_drawn_again(verdicts):
    """tests/cheats/zeroes_when_timed.py zeroes its input and any copy of it it finds
    (gc), then returns zeros: against a copy held through the calls it passed; against
    the inputs drawn again from their seed after the calls it is caught."""
    v = verdicts[-1]
    assert (v["verdict"], v["gate"]) == ("fail", "anti-cheat"), v["gates"]
    assert v["gates"]["correctness"]["status"] == "pass"
    assert "the inputs changed" in v["gates"]["anti-cheat"]["detail"]


def test_the_int8_ceiling_is_the_higher_of_int_mm_and_twice_bf16():
    from kernelladder.verifier.worker.timing import with_int8_ceiling

    h200 = {"copy": 4.1e9, "bf16": 7.89e11, "int8_int_mm": 9.52e11}  # ops/ms, as measured
    assert with_int8_ceiling(h200)["int8"] == 2 * 7.89e11
    assert with_int8_ceiling({"bf16": 1e11, "int8_int_mm": 3e11})["int8"] == 3e11
    assert with_int8_ceiling({"int8_int_mm": 3e11})["int8"] == 3e11  # no bf16 measured
    assert "int8" not in with_int8_ceiling({"copy": 1.0})  # nothing to go on: no floor


def test_a_re_measure_times_every_shape_back_to_back_for_more_rounds(verdicts):
    v = verdicts[len(SCENARIOS) + 1 + len(PAIRED)]  # 1.0 ms against 0.5 ms: far apart
    assert v["verdict"] == "pass", v["gates"]
    for t in v["timings"]:
        assert t["paired"]["baseline"] == "F.rms_norm" and t["paired"]["rounds"] == 15
        assert (t["paired"]["lost"], t["paired"]["verdict"]) == (15, "slower")


@pytest.mark.parametrize("index", range(len(REMEASURE_SEQUENTIAL)))
def test_a_re_measures_rounds_stop_once_a_tie_is_settled_and_only_then(verdicts, index):
    word, rounds = REMEASURE_SEQUENTIAL[index][4:]
    v = verdicts[len(verdicts) - 1 - len(REMEASURE_SEQUENTIAL) + index]
    assert v["verdict"] == "pass", v["gates"]
    for t in v["timings"]:
        paired = t["paired"]
        assert (paired["baseline"], paired["verdict"], paired["rounds"]) == (
            "F.rms_norm", word, rounds,
        )  # fmt: skip
        assert len(paired["candidate_rounds_ms"]) == len(paired["baseline_rounds_ms"]) == rounds


def test_a_correct_kernel_slower_than_the_reference_passes_at_min_speedup_zero(verdicts):
    slow = verdicts[3]
    assert slow["speedup"] == pytest.approx(0.9)
    assert slow["gates"]["speed"]["status"] == "pass"
    detail = slow["gates"]["speed"]["detail"]
    assert "pass threshold 0x over the reference" in detail  # a threshold, not a measurement
    assert "noise of the geomean" in detail and "beyond 1%" in detail
    assert verdicts[4]["gates"]["speed"]["detail"].startswith("too slow")


@pytest.mark.parametrize("index", range(len(EARLY)))
def test_a_clearly_slower_candidate_stops_early_and_a_close_one_gets_full_timing(verdicts, index):
    from kernelladder.verifier.worker.speed_gate import COARSE_TARGET_MS
    from kernelladder.verifier.worker.timing import TARGET_MS

    cand, best, stops = EARLY[index]
    v = verdicts[len(SCENARIOS) + 2 + len(PAIRED) + index]
    assert v["verdict"] == "pass", v["gates"]
    speed = v["gates"]["speed"]
    trials = {t["trials"] for t in speed["evidence"]["per_shape"]}
    assert all(t["candidate_ms"] == cand for t in v["timings"])
    if stops:
        assert v["early_stop"]["attempt"] == 4 and v["early_stop"]["best_ms"] == 1.0
        assert v["early_stop"]["shape"] == ("geomean" if best["others"] < 1.0 else "33x257 bf16")
        assert speed["detail"].startswith("stopped early, not faster than #4")
        assert speed["evidence"]["early_stop"]["band"] == pytest.approx(0.05)
        assert trials == {int(COARSE_TARGET_MS)}  # coarse times at every shape
        assert all(t["paired"] is None for t in v["timings"])
    else:
        assert v["early_stop"] is None and "stopped early" not in speed["detail"]
        assert trials == {int(TARGET_MS)}  # every shape timed in full


@pytest.mark.parametrize("index", range(len(PIPELINED)))
def test_pipelined_timing_pools_a_first_look_with_the_rounds_or_more_trials(verdicts, index):
    """No repeated work: the pipelined path does not time the candidate in full and then
    again in the rounds; its time is the first look's trials and the rounds' (or more
    trials, to the same total as the serial path's), and the rounds' rigor is unchanged."""
    from kernelladder.verifier.worker.gates import PAIRED_ROUNDS
    from kernelladder.verifier.worker.speed_gate import COARSE_TARGET_MS, PAIRED_TARGET_MS
    from kernelladder.verifier.worker.timing import TARGET_MS

    cand, _extra, kind = PIPELINED[index]
    v = verdicts[len(SCENARIOS) + 2 + len(PAIRED) + len(EARLY) + index]
    assert v["verdict"] == "pass" and v["early_stop"] is None, v["gates"]
    shapes = v["gates"]["speed"]["evidence"]["per_shape"]
    expected = cand[0] if isinstance(cand, list) else cand
    assert all(t["candidate_ms"] == pytest.approx(expected) for t in v["timings"])
    if kind == "far":
        assert all(t["paired"] is None for t in v["timings"])
        assert {s["trials"] for s in shapes} == {int(TARGET_MS)}  # the look + the rest
        per_shape = [COARSE_TARGET_MS, TARGET_MS - COARSE_TARGET_MS]
    else:
        assert all(t["paired"]["rounds"] == PAIRED_ROUNDS for t in v["timings"])
        assert all(t["paired"]["verdict"] == "faster" for t in v["timings"])
        pooled = int(COARSE_TARGET_MS + PAIRED_ROUNDS * PAIRED_TARGET_MS)
        assert {s["trials"] for s in shapes} == {pooled}  # no separate full timing
        per_shape = [COARSE_TARGET_MS] + [PAIRED_TARGET_MS] * PAIRED_ROUNDS
    targets = v["cand_targets"]
    assert sorted(targets) == sorted(per_shape * len(shapes))  # the first looks taken once
    if _extra:  # the early stop looked at every shape first, the largest first
        assert targets[: len(shapes)] == [COARSE_TARGET_MS] * len(shapes)
