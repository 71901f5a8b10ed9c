"""The profiled process: one candidate on the op's largest shape, run under Nsight Compute in
the caller's phases (contract/profile_phases.py): loaded without the GPU, warmed up beside
other correctness runs, then the one profiled call with the GPU to itself.

    python3 -m kernelladder.verifier.worker.profile_driver drive OP.json CANDIDATE.py BASE
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kernelladder.verifier.contract import profile_phases as phase


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(phase.SIGNAL_POLL_S)


def drive(op_path: str, source_path: str, base: str) -> int:
    """Run the candidate on the op's largest shape, in the caller's phases: load it (no
    GPU), then warm it up (shared), then the one profiled call (exclusive)."""
    import torch

    from kernelladder.ops.registry import op_from_wire
    from kernelladder.verifier.worker import candidate as candidate_mod

    spec = op_from_wire(json.loads(Path(op_path).read_text(encoding="utf-8")))
    source = Path(source_path).read_text(encoding="utf-8")
    device = os.environ.get("KERNELLADDER_PROFILE_DEVICE", "cuda")  # "cpu": the CPU tests
    shapes = spec.shapes_for(device)
    largest = getattr(spec, "largest_shape", None)
    shape = largest(device) if callable(largest) else max(shapes, key=spec.bytes_moved)
    scratch = str(Path(source_path).parent)
    loaded = candidate_mod.load(source, spec, scratch, device, "profile")
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:  # the context is made (seconds under ncu) before the GPU is asked for: no kernel runs
        torch.cuda.init()
        torch.empty(1, device=device)
    Path(base + phase.READY).touch()
    wait_for(base + phase.WARM_GO)
    inputs = spec.make_inputs(shape, 0, device)
    args = [inputs[n] for n in spec.arg_names]
    loaded.call(*args)  # compiles
    sync()
    loaded.call(*args)
    sync()
    phases: dict[str, float] = {}
    clock = time.perf_counter
    if cuda:  # ncu readies its collection now, beside the others: no kernel runs until the turn
        t = clock()
        torch.cuda.profiler.start()
        phases["profiler_start_s"] = clock() - t
    Path(base + phase.WARM).touch()
    wait_for(base + phase.REPLAY_GO)
    t = clock()
    loaded.call(*args)  # ncu replays it, pass after pass, inside this launch
    sync()
    phases["profiled_call_s"] = clock() - t
    if cuda:
        t = clock()
        torch.cuda.profiler.stop()
        phases["profiler_stop_s"] = clock() - t
    Path(base + phase.PHASES).write_text(json.dumps({k: round(v, 4) for k, v in phases.items()}))
    Path(base + phase.DONE).touch()
    print(f"profiled {spec.name} at {shape.label}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "drive":
        sys.exit(drive(sys.argv[2], sys.argv[3], sys.argv[4]))
    print(f"usage: python3 -m {phase.DRIVER_MODULE} drive OP.json CANDIDATE.py BASE")
    sys.exit(2)
