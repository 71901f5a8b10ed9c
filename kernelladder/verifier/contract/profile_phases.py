"""How a profiled process and its caller take turns on the GPU: files beside the report.

The caller starts `python -m DRIVER_MODULE drive OP.json CANDIDATE.py BASE` under ncu. The
driver touches BASE + READY once the candidate is loaded (no GPU), waits for WARM_GO, warms
up and touches WARM, waits for REPLAY_GO, runs the one profiled call, writes its own
seconds to BASE + PHASES and touches DONE. Standard library only.
"""

from __future__ import annotations

DRIVER_MODULE = "kernelladder.verifier.worker.profile_driver"
# what the driver waits for, what it says
READY, WARM_GO, WARM, REPLAY_GO, DONE = ".ready", ".warm.go", ".warm", ".replay.go", ".done"
PHASES = ".phases"  # the driver's own seconds: ncu's start, the profiled call, ncu's stop
SIGNAL_POLL_S = 0.005
