"""The GPU's copy and matmul rates kept on disk per (GPU, driver, torch), dated: a run
takes them instead of measuring at its start; another GPU, driver or torch, or an entry
older than STALE_DAYS, is measured again. Real files in a temporary cache directory."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

import pytest

from kernelladder.verifier.host import calibration
from kernelladder.verifier.host.calibration import GpuIdentity
from kernelladder.verifier.host.gpu_arbiter import GpuFacts

H200 = GpuIdentity("NVIDIA H200", "570.86.15", "2.11.0+cu128")
RATES = {"copy": 4.23e9, "bf16": 7.9e11, "int8": 1.58e12}
NOW = dt.datetime(2026, 12, 2, 4, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_rates_kept_for_a_gpu_are_read_back_with_their_date():
    assert calibration.write_rates(H200, RATES, now=NOW)
    assert calibration.read_rates(H200, now=NOW + dt.timedelta(days=3)) == RATES
    entry = calibration.entries()[H200.key]
    assert entry["measured_at"] == "2026-12-02T04:00:00+00:00"


@pytest.mark.parametrize(
    "other",
    [
        GpuIdentity("NVIDIA H100 80GB HBM3", H200.driver, H200.torch),
        GpuIdentity(H200.gpu, "575.51.03", H200.torch),
        GpuIdentity(H200.gpu, H200.driver, "2.13.0+cu130"),
    ],
    ids=["another GPU", "another driver", "another torch"],
)
def test_another_gpu_driver_or_torch_does_not_take_them(other):
    calibration.write_rates(H200, RATES, now=NOW)
    assert calibration.read_rates(other, now=NOW) is None
    # its own measurement is kept beside, and neither replaces the other
    calibration.write_rates(other, {"copy": 3.0e9}, now=NOW)
    assert calibration.read_rates(other, now=NOW) == {"copy": 3.0e9}
    assert calibration.read_rates(H200, now=NOW) == RATES


def test_stale_rates_are_measured_again():
    calibration.write_rates(H200, RATES, now=NOW)
    later = NOW + dt.timedelta(days=calibration.STALE_DAYS)
    assert calibration.read_rates(H200, now=later) is None
    assert calibration.read_rates(H200, now=NOW - dt.timedelta(days=1)) is None  # a clock set back


def test_recalibrate_drops_every_entry(cache_dir):
    calibration.write_rates(H200, RATES, now=NOW)
    assert calibration.forget() == 1
    assert calibration.read_rates(H200, now=NOW) is None and calibration.entries() == {}


def test_a_file_of_another_schema_or_broken_is_ignored(cache_dir):
    cache_dir.mkdir(parents=True)
    path = cache_dir / calibration.FILE_NAME
    path.write_text(json.dumps({"schema_version": 99, "entries": {H200.key: {}}}))
    assert calibration.read_rates(H200, now=NOW) is None
    path.write_text("{not json")
    assert calibration.read_rates(H200, now=NOW) is None
    assert calibration.write_rates(H200, RATES, now=NOW)  # and replaced
    assert calibration.read_rates(H200, now=NOW) == RATES


def test_a_gpus_facts_take_kept_rates_and_keep_measured_ones_once(monkeypatch):
    def verdict(rates):
        return SimpleNamespace(passed=True, timings=(object(),), environment={"rates": rates})

    first = GpuFacts()
    assert not first.calibrate(H200)  # nothing kept: the first verdict measures them
    first.learn_rates(verdict(RATES))
    assert first.rates == RATES and calibration.read_rates(H200) == RATES
    writes = []
    monkeypatch.setattr(calibration, "write_rates", lambda *a, **k: writes.append(a) or True)
    first.learn_rates(verdict({"copy": 1.0}))
    assert writes == []  # kept once per run
    second = GpuFacts()  # the next run on this machine
    assert second.calibrate(H200) and second.rates == RATES
    assert second.rates_only() == {"rates": RATES, "shapes": {}}


def test_the_driver_version_is_read_from_the_kernel_module_line(tmp_path):
    version = tmp_path / "version"
    version.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build"
        "  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 20:46:46 UTC 2025\n"
        "GCC version:  gcc version 12.3.0\n"
    )
    assert calibration.driver_version(str(version)) == "570.86.15"
    assert calibration.driver_version(str(tmp_path / "none")) == ""


def test_doctor_recalibrate_drops_the_kept_rates_and_says_why_none_were_measured():
    from kernelladder.cli.doctor import WARN, rates_check

    calibration.write_rates(H200, RATES, now=NOW)
    shown = rates_check(recalibrate=False)
    assert "NVIDIA H200 (2026-12-02)" in shown.detail
    check = rates_check(recalibrate=True)  # no GPU on this machine
    assert check.status == WARN and check.detail.startswith("1 kept dropped; not measured")
    assert calibration.entries() == {}


def test_rates_kept_the_old_way_one_median_each_are_measured_again(cache_dir):
    # version 1 files hold rates of one median each, which read a matmul 10-15 % slow when
    # the GPU had just been busy (docs/results/2026-12-06.md, night): not used, measured again
    assert calibration.write_rates(H200, RATES, now=NOW)
    assert calibration.read_rates(H200, now=NOW) == RATES
    path = cache_dir / calibration.FILE_NAME
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2
    path.write_text(json.dumps({**data, "schema_version": 1}))
    assert calibration.read_rates(H200, now=NOW) is None


def test_a_ceiling_is_the_fastest_of_several_medians():
    # a stand-in for GpuTimer (no GPU here): its medians as an H100's bf16 matmul read them
    # one after another, the first from cold and the later ones after the clocks came down
    from kernelladder.verifier.worker import timing

    class Medians:
        def __init__(self, ms):
            self.ms = list(ms)

        def time(self, fn, target_ms):
            fn()
            return SimpleNamespace(median_ms=self.ms.pop(0))

    calls = []
    timer = Medians([1.374, 1.549, 1.621, 1.0])
    assert timing.best_ms(timer, lambda: calls.append(1)) == 1.374
    assert len(calls) == timing.RATE_REPEATS == 3  # the fourth median never taken
