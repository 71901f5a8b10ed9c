"""The run's first lines say where a new verifier worker's start went (its hello's
setup_s), so a person sees what a cold box's first command waits for."""

from __future__ import annotations

from kernelladder.engine.runners.local import start_line


def test_the_slowest_new_worker_is_named_step_by_step():
    hellos = [
        {"pid": 1, "setup_s": {"imports": 4.3, "device": 0.8, "compilers": 3.0}},
        {"pid": 2, "setup_s": {"imports": 5.25, "device": 0.9, "compilers": 3.1}},
        {"pid": 3, "setup_s": {"imports": 9.0}},  # kept from an earlier run: not this start
    ]
    assert start_line(hellos, taken=[3]) == (
        "verifier workers started in 9.2 s (the slowest of 2: imports 5.2, device 0.9, "
        "compilers 3.1 s)"
    )


def test_nothing_is_said_for_kept_workers_or_a_silent_hello():
    assert start_line([{"pid": 1, "setup_s": {"imports": 1.0}}], taken=[1]) == ""
    assert start_line([{"pid": 1}], taken=[]) == ""
    assert start_line([{"pid": 1, "setup_s": {"ops_and_walls": 0.04}}], taken=[]) == (
        "verifier workers started in 0.0 s (one: ops and walls 0.0 s)"
    )
