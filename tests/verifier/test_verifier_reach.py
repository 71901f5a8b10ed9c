"""What a candidate cannot reach, through a real worker process and the real Triton
interpreter (CPU): operators re-registered below torch's attributes, the global switches
that choose what a baseline runs, the timer's functions, the unseen shapes; and what it
may do (operators of its own namespace).

One worker serves the module's candidates (the client replaces it after a cheat, and
after a candidate that defined operators of its own).
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest
from helpers import CHEATS

from kernelladder.verifier.host.client import LocalTransport, WorkerClient

HONEST = (CHEATS / "honest_rmsnorm.py").read_text()


@pytest.fixture(scope="module")
def worker():
    loop = asyncio.new_event_loop()
    client = WorkerClient(lambda: LocalTransport("cpu"), secrets=[])
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


def verify(worker, source: str, op: str = "rmsnorm", **extra):
    loop, client = worker
    request = {"op": op, "source": source, "device": "cpu", **extra}
    return loop.run_until_complete(client.verify(request, timeout_s=180))


def gates_text(v) -> dict:
    return {g: (r.status, r.detail) for g, r in v.gates.items()}


def cheat(name: str) -> str:
    return (CHEATS / f"{name}.py").read_text()


# --- operators re-registered below torch's attributes ------------------------------------


def test_an_operator_re_registered_for_the_cpu_key_fails_at_anti_cheat_naming_it(worker):
    """x * weight for rmsnorm, with aten::rsqrt made to return ones on the CPU: the
    reference in the same process agreed with it, and it passed every gate."""
    v = verify(worker, cheat("reregisters_aten_cpu"))
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    detail = v.gates["anti-cheat"].detail
    assert "aten::rsqrt: a CPU kernel registered" in detail and "candidate.py:" in detail
    assert "while loading" in detail and "torch-state-changed" in v.flags


def test_the_same_registration_for_the_cuda_key_is_caught_as_it_registers(worker):
    """On a GPU it would make the reference compute x * weight; on the CPU it changes no
    result, so only the audit of registrations can name it (before any trial runs)."""
    v = verify(worker, cheat("reregisters_aten_cuda"))
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    assert "aten::rsqrt: a CUDA kernel registered" in v.gates["anti-cheat"].detail
    assert v.gates["correctness"].status == "skipped"


def test_a_registration_made_around_the_log_fails_against_the_references_fingerprint(worker):
    """The same cheat through torch's own door, dug out of the log's wrapper: the
    reference computed after the first call differs from the one fingerprinted before
    the candidate loaded, and the dispatcher's listing names the kernel."""
    v = verify(worker, cheat("reregisters_aten_around_the_log"))
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    detail = v.gates["anti-cheat"].detail
    assert "differ from those computed before the candidate loaded" in detail, detail
    assert "aten::rsqrt: a CPU kernel registered" in detail
    assert "reference-changed" in v.flags


# --- global switches -------------------------------------------------------------------------

# (a line run as the candidate loads, what the verdict names)
SWITCHES = [
    ("torch.backends.cuda.enable_flash_sdp(False)", "flash_sdp_enabled(): True -> False"),
    (
        "torch.backends.cuda.enable_mem_efficient_sdp(False)",
        "mem_efficient_sdp_enabled(): True -> False",
    ),
    ("torch.backends.cuda.enable_cudnn_sdp(False)", "cudnn_sdp_enabled(): True -> False"),
    ("torch.backends.cuda.enable_math_sdp(False)", "math_sdp_enabled(): True -> False"),
    ("torch.backends.cudnn.enabled = False", "torch.backends.cudnn.enabled: True -> False"),
    ("torch.backends.cudnn.benchmark = True", "torch.backends.cudnn.benchmark: False -> True"),
    (
        "torch.backends.cudnn.deterministic = True",
        "torch.backends.cudnn.deterministic: False -> True",
    ),
    ("torch.backends.cudnn.allow_tf32 = False", "torch.backends.cudnn.allow_tf32: True -> False"),
    (
        "torch.backends.cuda.matmul.allow_tf32 = True",
        "torch.backends.cuda.matmul.allow_tf32: False -> True",
    ),
    (
        "torch.set_float32_matmul_precision('medium')",
        "torch.get_float32_matmul_precision(): 'highest' -> 'medium'",
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False",
        "allow_bf16_reduced_precision_reduction: (True, True) -> (False, True)",
    ),
    (
        "torch.use_deterministic_algorithms(True)",
        "torch.are_deterministic_algorithms_enabled(): False -> True",
    ),
    (
        "import torch._inductor.config\ntorch._inductor.config.max_autotune = True",
        "torch._inductor.config.max_autotune: False -> True",
    ),
    (
        "import torch._dynamo\ntorch._dynamo.config.recompile_limit = 2",
        "torch._dynamo.config.recompile_limit: 1024 -> 2",
    ),
    ("torch.backends.opt_einsum.enabled = False", "torch.backends.opt_einsum.enabled"),
    ("torch.set_num_threads(1)", "torch.get_num_threads()"),
    (
        "from torch.overrides import TorchFunctionMode\nTorchFunctionMode().__enter__()",
        "__torch_function__ modes: 0 on the stack -> 1",
    ),
    (
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "TorchDispatchMode().__enter__()",
        "__torch_dispatch__ modes: 0 on the stack -> 1",
    ),
    (
        "import triton.knobs\ntriton.knobs.runtime.launch_enter_hook = lambda *a: None",
        "triton.knobs.runtime.launch_enter_hook",
    ),
]


def with_line(line: str) -> str:
    """The honest candidate with `line` run as it loads."""
    return HONEST.replace("\n\n@triton.jit", "\n\n" + line + "\n\n\n@triton.jit", 1)


@pytest.mark.parametrize("line,named", SWITCHES, ids=[s[1][:40] for s in SWITCHES])
def test_each_global_switch_flipped_as_it_loads_fails_at_anti_cheat_naming_it(worker, line, named):
    v = verify(worker, with_line(line))
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    assert named in v.gates["anti-cheat"].detail, v.gates["anti-cheat"].detail


def test_a_switch_flipped_during_a_call_fails_at_anti_cheat_after_that_call(worker):
    source = HONEST.replace(
        "def kernel(x, weight):\n",
        "_calls = [0]\n\n\ndef kernel(x, weight):\n"
        "    _calls[0] += 1\n"
        "    if _calls[0] == 3:\n"
        "        torch.backends.cuda.enable_flash_sdp(False)\n",
    )
    v = verify(worker, source)
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    detail = v.gates["anti-cheat"].detail
    assert "while being called" in detail and "flash_sdp_enabled(): True -> False" in detail


def test_attention_with_sdpas_fused_backends_off_fails_as_it_loads(worker):
    """The cheat that would slow attention's sdpa baseline down: on a GPU,
    bench/judge_walls.py shows the baseline it then gets is the one before."""
    v = verify(worker, cheat("attention_sdpa_off"), op="attention")
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    detail = v.gates["anti-cheat"].detail
    for backend in ("flash", "mem_efficient", "cudnn"):
        assert f"{backend}_sdp_enabled(): True -> False" in detail, detail


# --- the timer's functions ---------------------------------------------------------------------


def test_a_candidate_patching_the_timing_functions_is_named_for_each(worker):
    v = verify(worker, cheat("patches_timer_functions"))
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    altered = v.gates["anti-cheat"].evidence["altered"]
    for name in (
        "time.perf_counter replaced",
        "torch.cuda.Event.record replaced",
        "torch.cuda.Event.elapsed_time replaced",
        "torch.cuda.synchronize replaced",
        "triton.testing.do_bench replaced",
        "statistics.median: its code replaced",
    ):
        assert name in altered, altered


# --- operators of the candidate's own ------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["honest_custom_op_rmsnorm", "honest_triton_op_rmsnorm", "honest_own_library_rmsnorm"]
)
def test_a_kernel_wrapped_as_an_operator_of_its_own_passes_twice_in_a_row(worker, name):
    """torch.library.custom_op, triton_op and a Library of its own namespace: legal. The
    worker retires after each (the next candidate, defining the same operator again,
    finds torch as it was)."""
    loop, client = worker
    for _ in range(2):
        started = client.workers_started
        v = verify(worker, cheat(name))
        assert v.verdict == "pass", gates_text(v)
        assert not client.alive  # replaced before the next candidate
        assert client.workers_started in (started, started + 1)
    v = verify(worker, HONEST)
    assert v.verdict == "pass", gates_text(v)


def test_torch_compute_inside_an_operator_of_its_own_fails_at_the_fence(worker):
    v = verify(worker, cheat("custom_op_hides_torch"))
    assert (v.verdict, v.gate) == ("fail", "fence"), gates_text(v)
    offending = v.gates["fence"].evidence["offending_ops"]
    assert any(op.startswith("aten::rsqrt") for op in offending), offending


def test_an_operator_of_its_own_beside_one_registered_into_aten_still_fails(worker):
    source = cheat("honest_custom_op_rmsnorm").replace(
        "\n\ndef kernel(x, weight):",
        textwrap.dedent(
            """

            _aten = torch.library.Library("aten", "IMPL")
            _aten.impl("mean.dim", lambda *a, **k: None, "CPU")


            def kernel(x, weight):"""
        ),
    )
    v = verify(worker, source)
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    assert "aten::mean.dim: a CPU kernel registered" in v.gates["anti-cheat"].detail


# --- unseen shapes ---------------------------------------------------------------------------------


def test_a_kernel_correct_only_at_the_suites_row_lengths_fails_20_checks_of_20(worker):
    """Each check draws its unseen shapes afresh (no seed given): every one fails."""
    source = cheat("suite_lengths_only")
    assert verify(worker, source, unseen_shapes=0).verdict == "pass"  # the suite alone
    for _ in range(20):
        v = verify(worker, source)
        assert (v.verdict, v.gate) == ("fail", "correctness"), gates_text(v)
        detail = v.gates["correctness"].detail
        assert detail.startswith("correct on the suite, wrong at an unseen shape: "), detail
