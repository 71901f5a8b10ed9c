#!/usr/bin/env python3
"""torch.compile of an op's reference, compiled three ways, timed with the verifier's timer
at the op's largest GPU shape: per shape with static sizes (what the verifier's baseline
does), with the default automatic-dynamic policy after a first call at another shape
(sizes become symbolic on the recompile), and with dynamic=True. Needs a GPU.

With --kernel, a candidate of OP is duelled instead with the static and the dynamic=True
compile at every GPU shape of the suite, round by round (order rotating each round).

    PYTHONPATH=. python3 bench/compile_modes.py [OP ...]
    PYTHONPATH=. python3 bench/compile_modes.py OP --kernel CANDIDATE.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier.worker import candidate  # noqa: E402
from kernelladder.verifier.worker.timing import GpuTimer  # noqa: E402


def _fresh(reference):
    """A new code object calling `reference`: each compile mode gets its own dynamo cache."""
    namespace = {"reference": reference}
    exec("def call(inputs):\n    return reference(inputs)\n", namespace)
    return namespace["call"]


def duel(name: str, kernel_path: str, rounds: int, timer: GpuTimer) -> int:
    spec = get_op(name)
    loaded = candidate.load(
        Path(kernel_path).read_text(), spec, tempfile.mkdtemp(), "cuda", "kl_compile_modes"
    )
    static = torch.compile(_fresh(spec.reference), dynamic=False)
    dyn = torch.compile(_fresh(spec.reference), dynamic=True)
    print("| shape | kernel ms | static compile ms | won | dynamic=True compile ms | won |")
    print("|---|---|---|---|---|---|")
    for shape in spec.gpu_shapes:
        inputs = spec.make_inputs(shape, 0, "cuda")
        args_ = [inputs[n] for n in spec.arg_names]
        out = loaded.call(*args_)
        outs = out if isinstance(out, tuple | list) else (out,)
        if spec.compare(list(outs), spec.reference_hp(inputs), inputs, shape) is not None:
            print(f"| {shape.label} | WRONG |")
            continue
        fns = [
            ("kernel", functools.partial(loaded.call, *args_)),
            ("static", functools.partial(static, inputs)),
            ("dynamic", functools.partial(dyn, inputs)),
        ]
        times: dict[str, list[float]] = {k: [] for k, _ in fns}
        for r in range(rounds):
            order = fns[r % 3 :] + fns[: r % 3]
            for label, fn in order:
                fn()
                times[label].append(timer.time(fn, 20.0).median_ms)
        ks = times["kernel"]
        cells = [f"{statistics.median(ks):.4f}"]
        for label in ("static", "dynamic"):
            won = sum(1 for k, c in zip(ks, times[label], strict=True) if k < c)
            cells += [f"{statistics.median(times[label]):.4f}", f"{won}/{rounds}"]
        print(f"| {shape.label} | " + " | ".join(cells) + " |", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", default=["rmsnorm", "softmax"])
    parser.add_argument("--kernel", help="a candidate file of the (one) op named")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    timer = GpuTimer("cuda")
    if args.kernel:
        return duel(args.ops[0], args.kernel, args.rounds, timer)
    rows = []
    for name in args.ops:
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
