#!/usr/bin/env python3
"""The floors' ceiling, measured as the verifier measures it: how steady is it?

In one process on the GPU: the bf16 matmul rate (8192^3, random data, as
verifier/worker/timing.py's _measure_rates) as single medians of about 50 ms of trials, the
first taken cold, then again and again (the verifier took one such median before
timing.best_ms); then as timing.best_ms takes it now (the fastest of RATE_REPEATS
medians). Run it in two or three fresh processes: the spread of what each way reads is
how much a kernel's "% of floor" moves with it.

    PYTHONPATH=. python3 bench/ceiling_rates.py [--singles 6]
"""

from __future__ import annotations

import argparse
import json

import torch

from kernelladder.verifier.worker.timing import RATE_REPEATS, GpuTimer, best_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=6, help="single medians, the first cold")
    args = parser.parse_args()
    timer = GpuTimer("cuda")
    size = 8192
    a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    flops = 2.0 * size**3

    def mm():
        return torch.mm(a, b)

    singles = [flops / timer.time(mm, 50.0).median_ms / 1e9 for _ in range(args.singles)]
    best = [flops / best_ms(timer, mm) / 1e9 for _ in range(2)]
    print(json.dumps({
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "single_medians_tflops": [round(x, 1) for x in singles],
        "best_ms_tflops": [round(x, 1) for x in best],
        "best_ms_method": f"the fastest of {RATE_REPEATS} medians",
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
