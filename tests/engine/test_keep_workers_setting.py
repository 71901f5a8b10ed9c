"""--keep-workers (RunOptions.keep_workers_s): who keeps workers warm after a run and for
how long. On by default on a GPU only (CPU runs are what the test suite starts by the
hundred), KERNELLADDER_KEEP_WORKERS where the flag is not given, never for SSH or Ray;
the setting reaches the local runner, and a resume may change it."""

from __future__ import annotations

import pytest

from kernelladder.engine.run.options import DEFAULT_KEEP_WORKERS_S, KEEP_WORKERS_ENV, RunOptions
from kernelladder.engine.run.setup import RESUMABLE_OPTIONS
from kernelladder.engine.runners.local import LocalRunner, make_runner


@pytest.mark.parametrize(
    ("given", "device", "environ", "seconds"),
    [
        (None, "cuda", {}, DEFAULT_KEEP_WORKERS_S),
        (None, "cpu", {}, 0.0),
        (0.0, "cuda", {}, 0.0),
        (30.0, "cpu", {}, 30.0),
        (None, "cuda", {KEEP_WORKERS_ENV: "0"}, 0.0),
        (None, "cuda", {KEEP_WORKERS_ENV: "off"}, 0.0),
        (None, "cpu", {KEEP_WORKERS_ENV: "120"}, 120.0),
        (45.0, "cuda", {KEEP_WORKERS_ENV: "0"}, 45.0),  # the flag given wins
    ],
)
def test_how_long_workers_are_kept(given, device, environ, seconds):
    options = RunOptions(op="rmsnorm", keep_workers_s=given)
    assert options.keep_workers_seconds(device, environ) == seconds


@pytest.mark.parametrize("value", ["soon", "-5", "nan", "inf"])
def test_a_variable_that_is_no_number_of_seconds_is_refused(value):
    with pytest.raises(ValueError, match=KEEP_WORKERS_ENV):
        RunOptions(op="rmsnorm").keep_workers_seconds("cuda", {KEEP_WORKERS_ENV: value})


def test_remote_and_ray_runs_keep_nothing():
    for options in (
        RunOptions(op="rmsnorm", remote=True, keep_workers_s=600.0),
        RunOptions(op="rmsnorm", ray_address="auto", keep_workers_s=600.0),
    ):
        assert options.keep_workers_seconds("cuda", {}) == 0.0


def test_the_setting_reaches_the_local_runner_and_a_resume_may_change_it():
    runner = make_runner(RunOptions(op="rmsnorm", keep_workers_s=30.0), "cpu")
    assert isinstance(runner, LocalRunner) and runner.keep_workers_s == 30.0
    assert make_runner(RunOptions(op="rmsnorm"), "cpu").keep_workers_s == 0.0
    assert "keep_workers_s" in RESUMABLE_OPTIONS
    assert RunOptions.from_dict({"op": "rmsnorm"}).keep_workers_s is None  # older runs
