"""What torch's state does while the verifier's own code runs is never charged to the
candidate: torch sets some switches lazily the first time a kernel runs (on a Hopper GPU
SDPA reorders its backends' priority at its first call: an H100's default attention run
failed 9 honest kernels of 25 at anti-cheat for it, the change made by the sdpa
baseline's first run). The judgement runs once before torch's state is taken, so what it
sets lazily is in the state every audit compares against; what changes later while only
the verifier's code runs is set back and named; the same change made by the candidate
still fails it.

Test doubles (say so): an op whose library baseline (or reference) sets SDPA's priority
order the first time it runs, as torch's own lazy setting does on a Hopper GPU (none
here), and a timer that calls what it times three times and answers 1 ms (no CUDA
events here). The rest is the real verifier in a fresh interpreter, as the worker sets
it up: a pipelined verification handed the baselines' times by the GPU's other workers
(so that its first run of the baseline is in the back-to-back rounds), the real Triton
interpreter and the real audits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import CHEATS, ROOT

HONEST = str(CHEATS / "honest_rmsnorm.py")
CLEAN, LAZY = [1, 2, 0, 3, 4], [3, 1, 2, 0, 4]

SCRIPT = r"""
import json, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton
from kernelladder.verifier.worker import fence, interp_patch, poison, registration_log
interp_patch.apply(); poison.setup_cpu_malloc(); fence.install_launch_counter()
registration_log.REGISTRATIONS.install()
from kernelladder.ops.registry import get_op
from kernelladder.ops.rmsnorm.spec import RmsNormSpec
from kernelladder.verifier.worker.gates import Verifier, VerifyOptions
from kernelladder.verifier.worker.timing import Timing

scenario = json.loads(sys.argv[1])
calls = {"baseline": 0, "reference": 0}

def lazy_baseline(inputs):  # as SDPA on a Hopper GPU: an order set as it first runs
    calls["baseline"] += 1
    if calls["baseline"] == scenario.get("baseline_sets_on_call") or (
        scenario.get("baseline_sets_once_loaded") and v.candidates_loaded and not calls.get("set")
    ):
        calls["set"] = True
        torch._C._set_sdp_priority_order(scenario["order"])
    x = inputs["x"]
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), inputs["weight"], 1e-6)

RmsNormSpec.library_baselines = lambda self: {"lazy": lazy_baseline}
plain_reference = RmsNormSpec.reference

def reference(self, inputs):
    calls["reference"] += 1
    if calls["reference"] == scenario.get("reference_sets_on_call"):
        torch._C._set_sdp_priority_order(scenario["order"])
    return plain_reference(self, inputs)

RmsNormSpec.reference = reference

class Timer:
    _rates = None
    def time(self, fn, target_ms=100.0):
        for _ in range(3):
            fn()
        return Timing(1.0, 0.01, 10)
    def rates(self):
        return {"copy": 1e9}
    def floor_ms(self, nbytes, flops, unit):
        return None

spec = get_op("rmsnorm")
known = {"rates": {"copy": 1e9}, "shapes": {s.label: {
    "reference_ms": 2.0, "baselines_ms": {"lazy": 1.0, "torch.compile": 50.0}, "age_s": 1.0}
    for s in spec.cpu_shapes}}
asked = []
def stage(name, gpu):
    asked.append([name, gpu])
    return known if name == "speed" else None

v = Verifier("cpu", tempfile.mkdtemp(), {}, timer=Timer())
out = []
for k, source in enumerate(scenario["sources"]):
    asked.clear()
    pipeline = scenario.get("pipeline", True)
    opts = VerifyOptions(op="rmsnorm", source=open(source).read(), device="cpu",
                         min_speedup=0.0, seeds=(0,), pipeline=pipeline,
                         baselines=scenario.get("baselines", True), paired_rounds=3)
    o = v.verify(opts, None, stage if pipeline else None)
    verdict = o.verdict
    out.append({
        "verdict": verdict.verdict, "gate": verdict.gate, "kind": verdict.kind,
        "details": {g: r.detail for g, r in verdict.gates.items()},
        "set_back": verdict.gates["anti-cheat"].evidence.get("set_back"),
        "paired": [t.paired is not None for t in verdict.timings],
        "retire": o.retire, "recycle": o.recycle, "asked": list(asked),
        "order": torch._C._get_sdp_priority_order(),
        "parts": sorted(verdict.stage_parts),
        "saved": verdict.to_dict().get("stage_parts") is not None,
    })
    between = scenario.get("between") or {}
    if str(k) in between:
        exec(between[str(k)])
print(json.dumps(out))
"""


def run(scenario: dict) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", SCRIPT, json.dumps(scenario)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def cheat_flipping(tmp_path, line: str) -> str:
    """The honest kernel, with `line` run at each of its calls."""
    source = (CHEATS / "honest_rmsnorm.py").read_text()
    source = source.replace("def kernel(x, weight):\n", f"def kernel(x, weight):\n    {line}\n")
    path = tmp_path / "flips.py"
    path.write_text(source)
    return str(path)


def test_a_baseline_setting_a_switch_as_it_first_runs_fails_no_honest_candidate(tmp_path):
    """The GPU's failure, on the CPU: the baselines' times came from the other workers,
    so the worker's first run of its baseline was in the back-to-back rounds, and the
    order it set was charged to the candidate ("changed torch's state while being
    timed: the SDPA backends' priority order"). The judgement's first run before the
    state is taken makes it part of that state: both candidates pass, with the rounds."""
    first, again = run({"sources": [HONEST, HONEST], "baseline_sets_on_call": 1, "order": LAZY})
    for v in (first, again):
        assert (v["verdict"], v["gate"]) == ("pass", None), v["details"]
        assert all(v["paired"]), v["details"]["speed"]  # the baseline ran in the rounds
        assert v["set_back"] is None and not v["retire"]
        assert v["order"] == LAZY  # torch's own choice stands for the baselines


def test_the_same_switch_flipped_by_the_candidate_still_fails_it_naming_it(tmp_path):
    flips = cheat_flipping(tmp_path, "torch._C._set_sdp_priority_order([0, 1, 2, 3, 4])")
    (v,) = run({"sources": [flips], "baseline_sets_on_call": 1, "order": LAZY})
    assert (v["verdict"], v["gate"]) == ("fail", "anti-cheat"), v["details"]
    detail = v["details"]["anti-cheat"]
    assert "the SDPA backends' priority order: [3, 1, 2, 0, 4] -> [0, 1, 2, 3, 4]" in detail
    assert "the candidate changed torch's state while compiling ahead" in detail


def test_a_reference_setting_a_switch_as_it_first_runs_fails_no_honest_candidate():
    """A serial verification times the reference itself: its first run, once in the
    speed gate after the candidate loaded, set the order the audit after the candidate's
    timing then charged to it."""
    (v,) = run(
        {
            "sources": [HONEST],
            "reference_sets_on_call": 1,
            "order": LAZY,
            "pipeline": False,
            "baselines": False,
        }
    )
    assert (v["verdict"], v["gate"]) == ("pass", None), v["details"]
    assert v["set_back"] is None and v["order"] == LAZY


def test_a_change_the_first_run_could_not_foresee_is_set_back_and_named_not_charged():
    """A baseline that sets the order only once the candidate has loaded (its first run
    in the rounds): not the candidate's doing, so not charged; set back to the clean
    state's order before the candidate runs again (whoever made it: the baselines are
    timed in the clean state), named in the verdict, and the worker retires."""
    (v,) = run({"sources": [HONEST], "baseline_sets_once_loaded": True, "order": LAZY})
    assert (v["verdict"], v["gate"]) == ("pass", None), v["details"]
    assert v["set_back"], v["details"]["anti-cheat"]
    assert (
        "the SDPA backends' priority order: [3, 1, 2, 0, 4] -> [1, 2, 0, 3, 4]"
        in (v["set_back"][0])
    )
    assert "set back" in v["details"]["anti-cheat"]
    assert v["order"] == CLEAN and v["retire"] and not v["recycle"]


def test_a_change_left_between_two_verifications_is_not_the_next_candidates():
    """Code a candidate left behind (a finalizer, a signal handler) flips a switch after
    its verdict: the next candidate is not charged with it. A switch is set back before
    it loads (and named); what cannot be set back (the default dtype) ends that
    verification as the worker's fault, before the candidate loads."""
    flips = "torch.backends.cudnn.benchmark = True"
    first, second = run({"sources": [HONEST, HONEST], "between": {"0": flips}})
    assert (second["verdict"], second["gate"]) == ("pass", None), second["details"]
    assert (
        "torch.backends.cudnn.benchmark: True -> False (set back), before the candidate "
        in (second["set_back"][0])
    )
    assert second["retire"]
    dtype = "torch.set_default_dtype(torch.float64)"
    first, second = run({"sources": [HONEST, HONEST], "between": {"0": dtype}})
    assert first["verdict"] == "pass"
    assert (second["kind"], second["gate"]) == ("crash", "crash"), second["details"]
    assert "before the candidate loaded: torch.get_default_dtype()" in second["details"]["crash"]
    assert second["recycle"]


def test_the_last_audit_gives_the_gpu_back_and_every_stage_names_its_parts():
    """The last audit of torch's state is a CPU's work: a pipelined verification enters
    a stage of its own for it that holds no GPU. The verdict says where each stage's
    time went (its parts), and keeps it when saved."""
    (v,) = run({"sources": [HONEST], "baseline_sets_on_call": 1, "order": LAZY})
    assert v["asked"][-1] == ["audit", "none"] and ["speed", "exclusive"] in v["asked"]
    for part in (
        "correctness.call",
        "correctness.inputs",
        "correctness.reference",
        "correctness.fingerprint",
        "correctness.compare",
        "correctness.digest",
        "correctness.integrity",
        "correctness.state.cheap",
        "correctness.state.end",
        "speed.timing.candidate",
        "speed.rounds",
        "speed.check",
        "audit.state.full",
        "references.warm-up",
        "references.fingerprints",
    ):
        assert part in v["parts"], (part, v["parts"])
    assert v["saved"]
