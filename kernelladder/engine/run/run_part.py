"""What every part of a run that verifies is handed once: the run's state, how it records
an event, its runner, the op as the worker reads it, its options and its device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelladder.engine.protocols import Runner
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import RunState
from kernelladder.engine.run.options import RunOptions


@dataclass(frozen=True)
class RunHandles:
    state: RunState
    emit: Callable[[ev.Event], object]
    runner: Runner
    op_wire: dict[str, Any]
    options: RunOptions
    device: Callable[[], str]  # the run's, known once RunStarted is logged


class RunPart:
    """A part of the run (verification, profiling, the best's re-measure) that keeps the
    handles it reads as its own attributes."""

    def __init__(self, run: RunHandles) -> None:
        self._state = run.state
        self._emit = run.emit
        self._runner = run.runner
        self._op_wire = run.op_wire
        self._device = run.device
        self._timeout_s = run.options.timeout_s
        self._min_speedup = run.options.min_speedup
