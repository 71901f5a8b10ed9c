"""Two `kernelladder optimize` commands on one machine with --keep-workers: the first
hands its worker to the keeper as it ends (a notice says so, before RunFinished), the
second takes that very process (a notice names its pid) instead of starting one; `doctor`
lists it and `doctor --stop-workers` stops it. Real subprocesses, the real search proposer
and CPU worker, a keeper socket of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from kernelladder.cli.doctor import kept_workers_check
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.verifier.contract.scratch import owner_alive, process_start_time


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", *args], capture_output=True, text=True,
        timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
    )  # fmt: skip


def _run(run_dir, *flags: str) -> list[ev.Event]:
    out = _cli(
        "optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--branches", "1",
        "--run-dir", str(run_dir), "--json", *flags,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return read_events(run_dir)


def _notices(events: list[ev.Event], start: str) -> list[ev.Notice]:
    return [e for e in events if isinstance(e, ev.Notice) and e.message.startswith(start)]


@pytest.mark.slow
def test_the_next_command_takes_the_worker_the_last_one_kept(keeper_socket, tmp_path):
    first = _run(tmp_path / "one", "--keep-workers", "60")
    (kept,) = _notices(first, "kept 1 verifier worker (pid ")
    assert isinstance(first[-1], ev.RunFinished) and kept.seq < first[-1].seq
    assert "--stop-workers" in kept.message
    pid = int(kept.message.split("(pid ")[1].split(")")[0])
    assert owner_alive(pid, process_start_time(pid))

    second = _run(tmp_path / "two", "--keep-workers", "60")
    (took,) = _notices(second, "took 1 verifier worker")
    assert f"(pid {pid})" in took.message
    assert _notices(second, f"kept 1 verifier worker (pid {pid})")

    listed = kept_workers_check()
    assert listed.detail.startswith(f"1 kept for the next local run: pid {pid} on cpu")
    doctor = _cli("doctor", "--stop-workers", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    detail = checks["kept workers"]["detail"]
    # the worker template this CPU run started (verifier/host/worker_template.py) goes too
    assert detail.startswith(f"stopped the keeper and its workers ({pid})")
    deadline = time.monotonic() + 10
    while owner_alive(pid, process_start_time(pid)):
        assert time.monotonic() < deadline, "the kept worker outlived --stop-workers"
        time.sleep(0.05)
    assert not os.path.exists(keeper_socket)


@pytest.mark.slow
def test_a_cpu_run_keeps_nothing_unless_asked(keeper_socket, tmp_path):
    events = _run(tmp_path / "run")
    assert not _notices(events, "kept ") and not _notices(events, "took ")
    assert not os.path.exists(keeper_socket)  # no keeper was started


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--keep-workers", "-1"], {}, "must not be negative"),
        (["--keep-workers", "60", "--ssh-target", "me@box"], {}, "--keep-workers applies to local"),
        ([], {"KERNELLADDER_KEEP_WORKERS": "soon"}, "KERNELLADDER_KEEP_WORKERS='soon'"),
    ],
)
def test_a_bad_keep_setting_is_one_line_and_exit_2(tmp_path, args, env, message):
    out = _cli(
        "optimize", "rmsnorm", "--device", "cpu", "--run-dir", str(tmp_path / "r"), *args, env=env
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and out.stderr.count("\n") == 1, out.stderr
