"""The audit of torch's global state (verifier/worker/torch_state.py), each in a fresh interpreter
(the changes it makes are global and would outlive the test): what each kind of change
is called, that nothing reads as changed when torch merely reads its configs or defines
an operator of a new namespace, that the comparison never runs an object's own code, and
that the operators checked after every call are those the judgement runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from helpers import ROOT

from kernelladder.verifier.worker import torch_state


def run(script: str, prelude: str = "") -> dict:
    """`script` (after `prelude`) in a fresh interpreter; the JSON of its last line."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", prelude + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PRELUDE = """
import json, torch, triton
import torch._dynamo, torch._inductor.config
from kernelladder.verifier.worker import torch_state as ts, selftest
from kernelladder.verifier.worker.registration_log import REGISTRATIONS
REGISTRATIONS.install()
selftest.warm_custom_ops("cpu")
before = ts.take(full=True)
REGISTRATIONS.armed = True
"""


def test_each_kind_of_change_is_named():
    out = run(
        prelude=PRELUDE,
        script="""
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("exp", lambda x: x, "CPU")                                  # a kernel
        torch.ops.aten.sin.default.py_kernels[torch._C.DispatchKey.CPU] = lambda x: x
        torch.ops.aten.cos = object()                                        # torch.ops' cache
        torch._inductor.config.post_grad_custom_post_pass = lambda g: None   # a config
        torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Python, True)
        fallback = torch.library.Library("_", "IMPL")
        fallback.fallback(lambda *a, **k: None, "PrivateUse3")               # a fallback
        changes = ts.changes(before, ts.FULL, registrations=REGISTRATIONS.take())
        print(json.dumps(changes.problems))
        """,
    )
    text = "\n".join(out)
    assert "torch.library: aten::exp: a CPU kernel registered" in text
    assert "aten::exp: a CPU kernel registered at" in text  # the dispatcher's own listing
    assert "torch.ops.aten.sin.default.py_kernels changed" in text
    assert "torch.ops.aten.cos replaced" in text
    assert "torch._inductor.config.post_grad_custom_post_pass: None -> <function>" in text
    assert "dispatch keys excluded on this thread" in text
    assert "a backend fallback registered for PrivateUse3" in text


def test_torch_reading_its_configs_and_an_operator_of_a_new_namespace_change_nothing():
    """torch copies mutable config defaults into overrides as it first reads them, and a
    candidate's own operators are its own: neither is a change."""
    out = run(
        prelude=PRELUDE,
        script="""
        torch._inductor.config.get_config_copy(); torch._dynamo.config.get_config_copy()

        @torch.library.custom_op("kl_test_own::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        twice(torch.ones(3))
        changes = ts.changes(before, ts.FULL, registrations=REGISTRATIONS.take())
        print(json.dumps({"problems": changes.problems, "own": sorted(changes.own_namespaces)}))
        """,
    )
    assert out == {"problems": [], "own": ["kl_test_own"]}


def test_an_operator_defined_in_torchs_own_namespace_is_a_change():
    out = run(
        prelude=PRELUDE,
        script="""
        lib = torch.library.Library("aten", "FRAGMENT")
        lib.define("kl_sneaky(Tensor x) -> Tensor")
        changes = ts.changes(before, ts.FULL, registrations=REGISTRATIONS.take())
        print(json.dumps(changes.problems))
        """,
    )
    assert any("aten::kl_sneaky" in p and "torch's namespace aten" in p for p in out), out


def test_the_comparison_never_runs_an_objects_own_code():
    class Loud:
        called = False

        def __eq__(self, other):
            Loud.called = True
            return True

        __hash__ = object.__hash__

    a, b = Loud(), Loud()
    assert not torch_state.same(a, b) and not torch_state.same([a], [b])
    assert not torch_state.same({"k": a}, {"k": b}) and not Loud.called
    assert torch_state.same([1, "x", (2.0, None)], [1, "x", (2.0, None)])
    assert torch_state.same(float("nan"), float("nan"))


def test_the_operators_checked_after_every_call_are_those_the_judgement_runs():
    """Every aten operator the comparison of each op (a pass and a failure), the digests
    and the bitwise checks reach, as torch's profiler sees them, is in JUDGE_OPS."""
    seen = run(
        """
        import json, torch
        from kernelladder.ops.registry import builtin_ops
        from kernelladder.verifier.worker.gate_tools import _digest, _same_value
        seen = set()
        for spec in builtin_ops():
            for shape in spec.cpu_shapes:
                inputs = spec.make_inputs(shape, 0, "cpu")
                hp = spec.reference_hp(inputs)
                outs = tuple(h.to(d) for h, (_s, d) in zip(hp, spec.expected_outputs(shape)))
                bad = tuple(o.clone() for o in outs)
                for b in bad:
                    b.view(-1)[0] = b.view(-1)[0] + 3 if b.dtype.is_floating_point else 99
                with torch.autograd.profiler.profile() as prof:
                    assert spec.compare(outs, hp, inputs, shape) is None
                    assert spec.compare(bad, hp, inputs, shape) is not None
                    for t in outs + hp:
                        _digest(t)
                    for t in inputs.values():
                        _same_value(t, t.clone())
                seen |= {e.name for e in prof.function_events if e.name.startswith("aten::")}
        print(json.dumps(sorted(seen)))
        """
    )
    assert seen and set(seen) <= torch_state.JUDGE_OPS, set(seen) - torch_state.JUDGE_OPS


def test_the_registration_log_notes_only_while_armed_and_says_when_it_was_put_back():
    out = run(
        """
        import json, torch
        from kernelladder.verifier.worker.registration_log import REGISTRATIONS as log
        log.install()
        quiet = torch.library.Library("kl_test_quiet", "DEF")
        quiet.define("f(Tensor x) -> Tensor")
        before = len(log.take())
        log.armed = True
        loud = torch.library.Library("kl_test_loud", "DEF")
        loud.define("g(Tensor x) -> Tensor")
        noted = [(r.method, r.op) for r in log.take()]
        intact = log.intact()
        torch._C._dispatch_library = torch._C._dispatch_library.__closure__[0].cell_contents
        print(json.dumps([before, noted, intact, log.intact()]))
        """
    )
    assert out == [0, [["define", "kl_test_loud::g"]], True, False]
