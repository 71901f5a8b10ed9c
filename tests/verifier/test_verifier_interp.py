"""The CPU worker's interpreter patches make bf16 kernels agree with torch (FACTS.md's two
bugs and their relatives). Runs in a fresh interpreter so the patches stay out of the
test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT

PROBE = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
if sys.argv[1] == "patched":
    from kernelladder.verifier.worker import interp_patch
    interp_patch.apply()

@triton.jit
def cast(x_ptr, y_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.bfloat16))

@triton.jit
def dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

@triton.jit
def arith(x_ptr, y_ptr, s_ptr, m_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    y = tl.load(y_ptr + o)
    z = -(x * y + x)
    tl.store(y_ptr + o, z)
    tl.store(s_ptr, tl.sum(x.to(tl.float32), axis=0).to(tl.bfloat16))
    tl.store(m_ptr, tl.max(x, axis=0))

n = 64
g = torch.Generator().manual_seed(0)
x = torch.randn(n, generator=g) * 3
y = torch.empty(n, dtype=torch.bfloat16)
cast[(1,)](x, y, n)
cast_bad = int((y.view(torch.int16) != x.to(torch.bfloat16).view(torch.int16)).sum())
a = torch.randn(16, 16, generator=g).bfloat16(); b = torch.randn(16, 16, generator=g).bfloat16()
c = torch.empty(16, 16)
dot[(1,)](a, b, c, 16)
dot_err = float((c - a.float() @ b.float()).abs().max())
xb = torch.randn(n, generator=g).bfloat16(); yb = torch.randn(n, generator=g).bfloat16()
want = -(xb * yb + xb)
s = torch.empty(1, dtype=torch.bfloat16); m = torch.empty(1, dtype=torch.bfloat16)
arith[(1,)](xb, yb, s, m, n)
arith_bad = int((yb.view(torch.int16) != want.view(torch.int16)).sum())
print(json.dumps({"cast_bad": cast_bad, "dot_err": dot_err, "arith_bad": arith_bad,
                  "max_ok": bool(m.item() == xb.max().item())}))
"""


def _run(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_patched_interpreter_matches_torch_bitwise_for_bf16():
    got = _run("patched")
    # casts and arithmetic bitwise; the dot's fp32 sums may round in another order than
    # torch's matmul (numpy 2.4 does): within fp32 rounding of 16 products, not garbage
    assert got.pop("dot_err") <= 1e-5
    assert got == {"cast_bad": 0, "arith_bad": 0, "max_ok": True}


def test_unpatched_interpreter_is_wrong_so_the_patch_matters():
    got = _run("plain")
    assert got["cast_bad"] > 0 and got["dot_err"] > 1.0 and got["arith_bad"] > 0


LISTING = r"""
import inspect, json, os
os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl
from triton.runtime import interpreter as interp
original = interp._patch_builtin
from kernelladder.verifier.worker import interp_patch
assert interp_patch.apply()["member-listing"] == "applied"
listed = interp._patch_builtin
assert listed is not original

def wrapped(fn, pkg):
    scope = interp._LangPatchScope()
    fn(pkg, interp.interpreter_builder, scope)
    changes = [(name, id(before)) for _, name, before in scope._changes]
    scope.restore()
    return changes

spaces = [tl, tl.core, tl.tensor, tl.math, tl.core.tensor_descriptor_base]
out = {"same": [wrapped(listed, p) == wrapped(original, p) for p in spaces]}
out["counts"] = [len(wrapped(listed, p)) for p in spaces]
# a builtin added to a namespace, and a builtin's value replaced: what getmembers gives
tl.core.kl_added = tl.core.builtin(lambda x, _semantic=None: x)
out["added"] = wrapped(listed, tl.core) == wrapped(original, tl.core)
out["added_seen"] = "kl_added" in [n for n, _ in wrapped(listed, tl.core)]
tl.kl_swap = tl.core.builtin(lambda x, _semantic=None: x)
wrapped(listed, tl)
tl.kl_swap = tl.core.builtin(lambda x, _semantic=None: x + 1)  # same keys, another value
out["swapped"] = wrapped(listed, tl) == wrapped(original, tl)
del tl.core.kl_added
out["removed"] = wrapped(listed, tl.core) == wrapped(original, tl.core)
print(json.dumps(out))
"""


def test_members_listed_once_wrap_what_getmembers_gives():
    """The listing kept per namespace (a cost, not a fix) wraps the very builtins the
    interpreter's own listing wraps, in the same order, also after a namespace gains or
    loses a member or a member is given another value."""
    proc = subprocess.run(
        [sys.executable, "-c", LISTING], capture_output=True, text=True, timeout=120,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(out["same"]) and min(out["counts"]) > 0, out
    assert out["added"] and out["added_seen"] and out["swapped"] and out["removed"], out
