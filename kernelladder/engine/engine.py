"""The engine's front door: what callers import to build, resume and describe runs.

The run itself is run.py: it schedules its branches and hands each of its parts (the
collaborators beside it) what that part reads; setup.py builds runs, op_info.py loads
ops, lines.py writes the one-line texts.
"""

from __future__ import annotations

from kernelladder.engine.best_confirmation import CONFIRM_LIMIT, CONFIRM_ROUNDS
from kernelladder.engine.lines import one_line, verdict_line
from kernelladder.engine.op_info import START_ATTEMPT, OpInfo, load_op_info
from kernelladder.engine.run import GATE_POLICIES, Run
from kernelladder.engine.setup import RESUMABLE_OPTIONS, create_run, new_run_id, resume_run
from kernelladder.engine.verification import (
    DONE,
    GATE,
    IDLE,
    MAX_RUNNER_RETRIES,
    PROPOSING,
    QUEUED,
    VERIFYING,
)

__all__ = [
    "CONFIRM_LIMIT", "CONFIRM_ROUNDS", "DONE", "GATE", "GATE_POLICIES", "IDLE",
    "MAX_RUNNER_RETRIES", "PROPOSING", "QUEUED", "RESUMABLE_OPTIONS", "START_ATTEMPT",
    "VERIFYING", "OpInfo", "Run", "create_run", "load_op_info", "new_run_id", "one_line",
    "resume_run", "verdict_line",
]  # fmt: skip
