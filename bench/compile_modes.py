#!/usr/bin/env python3
"""torch.compile of an op's reference, compiled three ways, timed with the verifier's timer
at the op's largest GPU shape: per shape with static sizes (what the verifier's baseline
does), with the default automatic-dynamic policy after a first call at another shape
(sizes become symbolic on the recompile), and with dynamic=True. Needs a GPU.

    PYTHONPATH=. python3 bench/compile_modes.py [OP ...]
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier.timing import GpuTimer  # noqa: E402


def _fresh(reference):
    """A new code object calling `reference`: each compile mode gets its own dynamo cache."""
    namespace = {"reference": reference}
    exec("def call(inputs):\n    return reference(inputs)\n", namespace)
    return namespace["call"]


def main() -> int:
    timer = GpuTimer("cuda")
    rows = []
    for name in sys.argv[1:] or ["rmsnorm", "softmax"]:
        spec = get_op(name)
        big, other = spec.gpu_shapes[0], spec.gpu_shapes[1]
        inputs = spec.make_inputs(big, 0, "cuda")
        static = torch.compile(_fresh(spec.reference), dynamic=False)
        auto = torch.compile(_fresh(spec.reference))
        auto(spec.make_inputs(other, 0, "cuda"))  # the first size, then the second below:
        dyn = torch.compile(_fresh(spec.reference), dynamic=True)  # recompiled symbolic
        modes = {"static": static, "automatic dynamic": auto, "dynamic=True": dyn}
        modes.update(spec.library_baselines())
        cells = {}
        for label, fn in modes.items():
            call = functools.partial(fn, inputs)
            call()
            cells[label] = timer.time(call).median_ms
        rows.append(
            f"| {name} | {big.label} | "
            + " | ".join(f"{k} {v:.4f}" for k, v in cells.items())
            + " |"
        )
        print(rows[-1], flush=True)
    print("\n| op | shape | ms |\n|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
