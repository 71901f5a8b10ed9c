"""The device a run verifies on when --device is not given, decided in one place
(runners.default_device) for every caller: `kernelladder optimize`, `check`, and a run
created from options alone (create_run)."""

from __future__ import annotations

import pytest
from helpers import ScriptedProposer, ScriptedRunner, scripted_op

from kernelladder.engine import create_run
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners import local


@pytest.fixture
def no_gpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine without a GPU, whatever the one running the test has (torch is not
    asked: a CUDA build is not seen, and its answer is no)."""
    monkeypatch.setattr(local, "gpus_seen_without_torch", lambda: 0)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)


@pytest.mark.parametrize(
    ("given", "device"),
    [
        ({}, "cpu"),  # here: no GPU, the CPU interpreter
        ({"device": "cuda"}, "cuda"),  # as given
        ({"remote": True}, "cuda"),  # the box's GPUs
        ({"remote": True, "device": "cpu"}, "cpu"),
        ({"ray_address": "auto"}, "cuda"),  # the cluster's GPUs
        ({"ray_address": "auto", "ray_slots": 2}, "cpu"),  # --ray-slots: CPU actors
    ],
)
def test_the_device_of_a_run_without_one_given(no_gpu_here, given, device):
    assert local.default_device(RunOptions(op="rmsnorm", **given)) == device


def test_this_machine_with_a_gpu_is_cuda(monkeypatch):
    monkeypatch.setattr(local, "gpus_seen_without_torch", lambda: 1)
    assert local.default_device() == local.default_device(RunOptions(op="rmsnorm")) == "cuda"


def test_a_remote_run_created_from_options_alone_verifies_on_the_box(no_gpu_here, tmp_path):
    """Not only the command line: create_run of remote options without a device records
    cuda (the box's GPUs), not this machine's CPU."""
    options = RunOptions(op="scripted", proposer="scripted", remote=True, run_dir=str(tmp_path))
    run = create_run(options, runner=ScriptedRunner(), proposer=ScriptedProposer([]),
                     op=scripted_op())  # fmt: skip
    assert run.options.device == "cuda"


def test_a_gpu_build_of_torch_without_a_driver_seen_asks_torch(monkeypatch):
    """A ROCm build (or a CUDA one whose GPUs the driver's entries do not show) is asked;
    only a build for the CPU alone is taken for the CPU without importing torch."""
    monkeypatch.setattr(local, "gpus_seen_without_torch", lambda: 0)
    monkeypatch.setattr(local, "torch_built_for_cpu_only", lambda: False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert local.default_device() == "cuda"
    monkeypatch.setattr(local, "torch_built_for_cpu_only", lambda: True)
    assert local.default_device() == "cpu"  # torch's answer is not asked for
