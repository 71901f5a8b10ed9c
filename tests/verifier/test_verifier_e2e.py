"""End to end through a real worker process and the real Triton interpreter (CPU).

One worker serves every candidate of this module (the client replaces it when a cheat
forces a recycle, a crash or a timeout), so torch is imported a handful of times, not
once per case.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers import ROOT

from kernelladder.ops.registry import BUILTIN_OPS, get_op
from kernelladder.verifier.contract.protocol import PROTOCOL_VERSION, encode
from kernelladder.verifier.contract.verdict import GATES
from kernelladder.verifier.host.client import LocalTransport, WorkerClient

CHEATS = ROOT / "tests" / "cheats"
KB_PROBLEM = ROOT / "examples" / "kernelbench" / "relu_bias_scale.py"
HANG_TIMEOUT_S = 8.0


@pytest.fixture(scope="module")
def worker():
    """(loop, client): one CPU worker reused across the module."""
    loop = asyncio.new_event_loop()
    client = WorkerClient(lambda: LocalTransport("cpu"), secrets=["sk-test-NEVER-SHOWN-123456"])
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


def verify(worker, op, source: str, timeout_s: float = 120.0, progress=None):
    loop, client = worker
    request = {"op": op, "source": source, "device": "cpu"}
    return loop.run_until_complete(
        client.verify(request, on_progress=progress, timeout_s=timeout_s)
    )


def kb_op() -> dict[str, str]:
    return {"kernelbench": KB_PROBLEM.read_text(), "name": KB_PROBLEM.name}


# --- the starting candidates pass ---------------------------------------------------------


@pytest.mark.parametrize("op_name", BUILTIN_OPS)
def test_starting_candidate_passes(worker, op_name):
    spec = get_op(op_name)
    seen = []
    v = verify(
        worker,
        op_name,
        Path(spec.starting_candidate).read_text(),
        progress=lambda g, m: seen.append(g),
    )
    assert v.verdict == "pass", {g: (r.status, r.detail) for g, r in v.gates.items()}
    assert list(v.gates) == list(GATES)
    assert [v.gates[g].status for g in GATES] == ["pass"] * 5 + ["skipped"]
    assert "no GPU" in v.gates["speed"].detail and v.speedup is None and v.timings == ()
    assert v.gates["fence"].evidence["launches"] >= v.gates["fence"].evidence["calls"] > 0
    assert {"load", "correctness"} <= set(seen)
    assert v.feedback.fence == spec.fence and v.feedback.expected and v.feedback.saw


def test_kernelbench_example_passes_and_wrong_one_fails(worker):
    good = (ROOT / "examples" / "kernelbench" / "relu_bias_scale_triton.py").read_text()
    v = verify(worker, kb_op(), good)
    assert v.verdict == "pass", {g: r.detail for g, r in v.gates.items()}
    wrong = (ROOT / "examples" / "kernelbench" / "relu_bias_scale_wrong.py").read_text()
    v = verify(worker, kb_op(), wrong)
    assert (v.verdict, v.gate) == ("fail", "correctness")


# --- every cheat is rejected by the right gate -----------------------------------------------

CHEAT_GATES = {
    "no_triton": "fence",
    "calls_library": "fence",
    "wrong_result": "correctness",
    "overwrites_reference": "correctness",
    "nan_output": "correctness",
    "unwritten_rows": "correctness",
    "pointer_cache": "correctness",
    "wrong_dtype": "correctness",
    "wrong_shape": "correctness",
    "mutates_input": "anti-cheat",
    "returns_alias": "anti-cheat",
    "returns_view": "anti-cheat",
    "tensor_subclass": "anti-cheat",
    "patch_allclose": "anti-cheat",
    "patch_timer": "anti-cheat",
    "patch_sync": "anti-cheat",
    "background_thread": "anti-cheat",
    "fake_compile_timer": "anti-cheat",
    "nondeterministic": "determinism",
    "hides_nondeterminism": "determinism",
    "raise_on_import": "load",
    "import_error": "load",
    "bad_signature": "load",
}


@pytest.mark.parametrize("cheat,gate", sorted(CHEAT_GATES.items()))
def test_cheat_rejected_by_its_gate(worker, cheat, gate):
    v = verify(worker, "rmsnorm", (CHEATS / f"{cheat}.py").read_text())
    assert v.verdict == "fail" and v.kind == "fail"
    assert v.gate == gate, {g: (r.status, r.detail) for g, r in v.gates.items()}
    assert v.gates[gate].status == "fail" and v.gates[gate].detail
    assert v.feedback.saw and v.feedback.fence
    later = GATES[GATES.index(gate) + 1 :]
    assert all(v.gates[g].status == "skipped" for g in later)


def test_cheat_evidence_names_the_problem(worker):
    v = verify(worker, "rmsnorm", (CHEATS / "calls_library.py").read_text())
    assert any("forbidden" in op for op in v.gates["fence"].evidence["offending_ops"])
    v = verify(worker, "rmsnorm", (CHEATS / "unwritten_rows.py").read_text())
    assert "nan where reference is finite" in v.feedback.saw
    v = verify(worker, "rmsnorm", (CHEATS / "pointer_cache.py").read_text())
    assert v.gates["correctness"].evidence["trial"] == "same input pointers, new values"
    v = verify(worker, "rmsnorm", (CHEATS / "patch_allclose.py").read_text())
    assert "torch.allclose replaced" in v.gates["anti-cheat"].evidence["altered"]


@pytest.mark.parametrize(
    "cheat,gate", [("kb_calls_reference", "fence"), ("kb_patches_reference", "anti-cheat")]
)
def test_kernelbench_cheats(worker, cheat, gate):
    v = verify(worker, kb_op(), (CHEATS / f"{cheat}.py").read_text())
    assert (v.verdict, v.gate) == ("fail", gate), {g: r.detail for g, r in v.gates.items()}


def test_a_problem_whose_inputs_differ_each_draw_is_checked_against_a_held_copy(worker):
    """The verifier draws a call's inputs again after the call to check it, where two
    draws come out the same; a problem drawing from an unseeded source (here Python's
    random, which KernelBench's seeding does not reach) is checked against a copy held
    through the call instead: the honest kernel passes, the wrong one still fails."""
    unseeded = KB_PROBLEM.read_text().replace(
        "    return [torch.randn(batch_size, features)]",
        "    import random\n\n    return [torch.randn(batch_size, features) + random.random()]",
    )
    assert "random.random()" in unseeded
    op = {"kernelbench": unseeded, "name": "unseeded_inputs.py"}
    good = (ROOT / "examples" / "kernelbench" / "relu_bias_scale_triton.py").read_text()
    v = verify(worker, op, good)
    assert v.verdict == "pass", {g: (r.status, r.detail) for g, r in v.gates.items()}
    wrong = (ROOT / "examples" / "kernelbench" / "relu_bias_scale_wrong.py").read_text()
    v = verify(worker, op, wrong)
    assert (v.verdict, v.gate) == ("fail", "correctness")


def test_syntax_error_is_a_load_failure(worker):
    v = verify(worker, "softmax", "def kernel(x):\n    return x +\n")
    assert v.gate == "load" and "syntax error" in v.gates["load"].detail
    assert "candidate.py:2" in v.gates["load"].detail


def test_missing_kernel_is_a_load_failure(worker):
    v = verify(worker, "softmax", "import torch\n\ndef kernal(x):\n    return x\n")
    assert v.gate == "load" and "defines no callable kernel" in v.gates["load"].detail


# --- faults become verdicts ------------------------------------------------------------------


def test_os_exit_is_a_crash_verdict(worker):
    v = verify(worker, "rmsnorm", (CHEATS / "crash_exit.py").read_text())
    assert (v.verdict, v.kind, v.gate) == ("fail", "crash", "crash")
    assert "exit code 3" in v.gates["crash"].detail


def test_segfault_is_a_crash_verdict(worker):
    v = verify(worker, "rmsnorm", (CHEATS / "segfault.py").read_text())
    assert (v.kind, v.gate) == ("crash", "crash")
    assert "SIGSEGV" in v.gates["crash"].detail


def test_hang_is_a_timeout_verdict_and_the_worker_is_replaced(worker):
    loop, client = worker
    v = verify(worker, "rmsnorm", (CHEATS / "hang.py").read_text(), timeout_s=HANG_TIMEOUT_S)
    assert (v.verdict, v.kind, v.gate) == ("fail", "timeout", "timeout")
    assert v.elapsed_s < HANG_TIMEOUT_S + 5
    assert "correctness" in v.gates["timeout"].detail  # the gate that was running
    assert not client.alive  # killed with its process group
    before = client.workers_started
    v = verify(worker, "rmsnorm", (CHEATS / "honest_rmsnorm.py").read_text())
    assert v.verdict == "pass" and client.alive and client.workers_started == before + 1


def test_candidate_stdout_does_not_break_the_protocol(worker):
    loop, client = worker
    lines = []
    client.on_stderr = lines.append
    try:
        v = verify(worker, "rmsnorm", (CHEATS / "prints_stdout.py").read_text())
    finally:
        client.on_stderr = None
    assert v.verdict == "pass", {g: r.detail for g, r in v.gates.items()}
    loop.run_until_complete(asyncio.sleep(0.2))
    assert any("candidate chatter" in line for line in lines)
    assert any("raw fd 1 write" in line for line in lines)


def test_secret_values_are_redacted_from_everything_returned(worker):
    secret = "sk-test-NEVER-SHOWN-123456"
    source = (
        "import triton\n"
        f"print('stdout {secret}')\n"
        f"raise RuntimeError('leak {secret} and {secret[::-1]}')\n"
    )
    loop, client = worker
    lines = []
    client.on_stderr = lines.append
    try:
        v = verify(worker, "rmsnorm", source)
    finally:
        client.on_stderr = None
    loop.run_until_complete(asyncio.sleep(0.2))
    text = json.dumps(v.to_dict()) + "\n".join(lines)
    assert v.gate == "load" and "[REDACTED]" in text
    assert secret not in text and secret[::-1] not in text and "NEVER-SHOWN" not in text


# --- protocol details --------------------------------------------------------------------------


def test_hello_reports_patches_poison_and_selftest(worker):
    loop, client = worker
    hello = loop.run_until_complete(client.hello())
    assert hello["device"] == "cpu" and hello["protocol"] == PROTOCOL_VERSION
    assert hello["selftest"] == "ok" and hello["poison"] == "verified"
    assert hello["compilers"] == "not needed"  # torch.compile's warm-up: GPU workers only
    assert "dot-bf16-upcast" in hello["interp_patches"]
    assert "cast-bf16-rtne" in hello["interp_patches"]


def test_worker_answers_ping_and_rejects_malformed_lines(worker):
    loop, client = worker

    async def exchange():
        await client.hello()
        t = client._transport
        t.stdin.write(b"this is not json\n" + encode({"type": "nonsense", "id": "n1"}))
        t.stdin.write(encode({"type": "ping", "id": "p1"}))
        await t.stdin.drain()
        got = []
        while len(got) < 3:
            got.append(json.loads(await asyncio.wait_for(t.stdout.readline(), 30)))
        return got

    got = loop.run_until_complete(exchange())
    assert [m["type"] for m in got] == ["error", "error", "pong"]
    assert got[2]["id"] == "p1"


def test_forged_verdict_line_is_caught(worker):
    v = verify(worker, "rmsnorm", (CHEATS / "forge_verdict.py").read_text())
    assert (v.verdict, v.gate) == ("fail", "anti-cheat")
    assert "protocol tampering" in v.gates["anti-cheat"].detail
    assert "protocol-tampering" in v.flags
