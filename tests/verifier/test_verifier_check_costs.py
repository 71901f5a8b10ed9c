"""What the checks around every call cost, counted rather than timed (the wall clock is
bench/warm_verify_loop.py's): integrity's check after a call asks no tracked function
for its code while none moved (each such read is an audit event the sandbox's hook
hears: some three thousand a call), the timed calls are checked against the checked
call's digests rather than the reference computed again, and a digest reads its tensor
as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import torch
from helpers import CHEATS, ROOT

from kernelladder.ops.registry import get_op
from kernelladder.verifier.worker.correctness import DETERMINISM_REPEATS
from kernelladder.verifier.worker.gate_tools import DIGEST_WIDTH, _digest


def run(script: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", textwrap.dedent(script), *args],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_check_after_a_call_reads_no_functions_code_while_none_moved():
    out = run(
        """
        import json, sys, torch
        from kernelladder.verifier.worker import integrity
        reads = [0]
        def hook(event, args):
            if event == "object.__getattr__":
                reads[0] += 1
        sys.addaudithook(hook)
        before = integrity.take()
        reads[0] = 0
        clean = integrity.altered(before)
        quiet = reads[0]
        torch.nn.functional.layer_norm.__dict__["noted"] = 1  # a function's dict, lazily
        lazily = integrity.altered(before)
        reads[0] = 0
        integrity.altered(before)
        quiet_again = reads[0]
        torch.nn.functional.softmax.__code__ = (lambda *a, **k: 0).__code__
        swapped = integrity.altered(before)
        print(json.dumps([clean, quiet, lazily, quiet_again, swapped]))
        """
    )
    clean, quiet, lazily, quiet_again, swapped = out
    assert clean == [] and lazily == []
    assert quiet == 0 and quiet_again == 0
    assert any("softmax: its code replaced" in line for line in swapped), swapped


TIMED = r"""
import json, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton
from kernelladder.verifier.worker import fence, interp_patch, poison
interp_patch.apply(); poison.setup_cpu_malloc(); fence.install_launch_counter()
from kernelladder.ops.rmsnorm.spec import RmsNormSpec
from kernelladder.verifier.worker.gates import Verifier, VerifyOptions
from kernelladder.verifier.worker.speed_gate import SpeedGate
from kernelladder.verifier.worker.timing import Timing

counted = {"speed": False, "reference_hp": 0}
plain_hp, plain_gate = RmsNormSpec.reference_hp, SpeedGate._speed_gate
def reference_hp(self, inputs):
    counted["reference_hp"] += counted["speed"]
    return plain_hp(self, inputs)
def speed_gate(self):
    counted["speed"] = True
    return plain_gate(self)
RmsNormSpec.reference_hp, SpeedGate._speed_gate = reference_hp, speed_gate

class Timer:
    def time(self, fn, target_ms=100.0):
        for _ in range(3):
            fn()
        return Timing(1.0, 0.01, 10)
    def rates(self):
        return {"copy": 1e9}
    def floor_ms(self, nbytes, flops, unit):
        return None

v = Verifier("cpu", tempfile.mkdtemp(), {}, timer=Timer())
out = []
for path in sys.argv[1:]:
    counted.update(speed=False, reference_hp=0)
    opts = VerifyOptions(op="rmsnorm", source=open(path).read(), device="cpu",
                         min_speedup=0.0, seeds=(0,), baselines=False)
    verdict = v.verify(opts).verdict
    out.append([verdict.verdict, verdict.gate, counted["reference_hp"],
                verdict.gates["anti-cheat"].detail])
print(json.dumps(out))
"""


def test_the_timed_calls_are_checked_against_the_checked_calls_digests(tmp_path):
    """An honest kernel's last timed call gives its checked call's outputs bit for bit:
    no reference is computed again in the speed gate. A kernel that answers otherwise
    once its checked calls are over is judged against the reference there, and caught."""
    spec = get_op("rmsnorm")
    checked = len(spec.cpu_shapes) * (1 + DETERMINISM_REPEATS + 1) + spec.unseen.count
    honest = (CHEATS / "honest_rmsnorm.py").read_text()
    late = honest.replace(
        "def kernel(x, weight):\n    return _rmsnorm_into(x, weight, torch.empty_like(x))",
        "_CALLS = [0]\n\n\ndef kernel(x, weight):\n    _CALLS[0] += 1\n    y = torch.empty_like(x)\n"
        f"    if _CALLS[0] > {checked}:  # timed: an eps a thousand times too large\n"
        "        m, n = x.shape\n"
        "        _rms_rows[(m,)](x, weight, y, n, 1e-3, BLOCK=triton.next_power_of_2(n))\n"
        "        return y\n"
        "    return _rmsnorm_into(x, weight, y)",
    )
    assert late != honest
    (tmp_path / "late.py").write_text(late)
    first, cheat = run(TIMED, str(CHEATS / "honest_rmsnorm.py"), str(tmp_path / "late.py"))
    assert first[:2] == ["pass", None] and first[2] == 0, first
    assert cheat[:2] == ["fail", "anti-cheat"], cheat
    assert "behaves differently when timed" in cheat[3] and cheat[2] >= 1


def test_a_digest_tells_apart_every_change_of_bits_and_reads_odd_sizes_and_views():
    """Guards the digest read in rows of 64-bit words: the same bits give the same digest;
    a swap within a row or across rows, a changed last byte past the whole words, another
    dtype or shape give another; an unaligned view is read too."""
    x = torch.randn(3 * DIGEST_WIDTH // 2 + 5, dtype=torch.float64)
    d = _digest(x)
    assert _digest(x.clone()) == d
    for i, j in ((0, 1), (1, DIGEST_WIDTH + 1), (5, x.numel() - 1)):
        y = x.clone()
        y[i], y[j] = x[j].item(), x[i].item()
        assert _digest(y) != d, (i, j)
    odd = torch.randn(3, 4097).to(torch.bfloat16)  # 24582 bytes: 6 past the last word
    changed = odd.clone()
    changed.view(-1)[-1] += 1
    assert _digest(odd) == _digest(odd.clone()) and _digest(changed) != _digest(odd)
    assert _digest(odd.view(torch.int16)) != _digest(odd)  # the dtype is in it
    assert _digest(x[:-5].reshape(-1, 3)) != _digest(x[:-5])  # and the shape
    base = torch.randn(101)
    assert _digest(base[1:])[2:] == _digest(base[1:].clone())[2:]
    assert _digest(torch.empty(0)) == _digest(torch.empty(0))
