"""Which new threads the anti-cheat gate lets pass: only the idle timer of torch.compile's
own compile-worker pool (inductor starts it for the torch.compile baseline, and on an H200
it appeared while an honest candidate ran). The pool is built without its __init__ so no
worker processes start; its timer is inductor's real Timer class, as in a real pool."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kernelladder.verifier.worker.anti_cheat import _compile_pool_timer


@pytest.fixture(scope="module")
def inductor() -> tuple[Any, Any]:
    """(SubprocPool, Timer), imported by these tests alone: torch._dynamo's import (a
    second of CPU) is not made by every process that collects the suite."""
    from torch._inductor.compile_worker.subproc_pool import SubprocPool
    from torch._inductor.compile_worker.timer import Timer

    return SubprocPool, Timer


def _started(timer: Any) -> threading.Thread:
    timer.record_call()
    thread = timer.background_thread
    assert thread is not None and thread.is_alive()
    return thread


def test_the_compile_pools_own_timer_is_exempt(inductor):
    SubprocPool, Timer = inductor
    pool = SubprocPool.__new__(SubprocPool)  # no workers: only the timer is wanted
    timer = Timer(30.0, pool.quiesce)
    try:
        assert _compile_pool_timer(_started(timer))
    finally:
        timer.quit()


def test_a_timer_calling_anything_else_is_not_exempt(inductor):
    _, Timer = inductor
    calls: list[int] = []
    timer = Timer(30.0, lambda: calls.append(1))
    try:
        thread = _started(timer)
        assert thread.name == "subproc_worker_timer"
        assert not _compile_pool_timer(thread)
    finally:
        timer.quit()


def test_a_thread_only_named_like_it_is_not_exempt():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="subproc_worker_timer", daemon=True)
    thread.start()
    try:
        assert not _compile_pool_timer(thread)
    finally:
        stop.set()
        thread.join(5)


def test_a_patched_timer_check_is_not_exempt(monkeypatch, inductor):
    SubprocPool, Timer = inductor
    pool = SubprocPool.__new__(SubprocPool)

    def check(self):  # a candidate replacing Timer.check with its own loop
        while not self.exit:
            time.sleep(0.01)

    monkeypatch.setattr(Timer, "check", check)
    timer = Timer(30.0, pool.quiesce)
    try:
        assert not _compile_pool_timer(_started(timer))
    finally:
        timer.quit()
