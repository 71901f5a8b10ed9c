"""The judge a candidate cannot reach, on a GPU: a candidate that turns SDPA's fused
backends off cannot change attention's baselines, and a candidate that patches the
timing functions still gets its true time.

    PYTHONPATH=$PWD python3 bench/judge_walls.py [--gpu-only-timer]

1. Attention, through real verifier workers (serial verification, as `kernelladder
   check` runs): the starting candidate, then tests/cheats/attention_sdpa_off.py (its
   kernel with flash, memory-efficient and cuDNN attention turned off as it loads), then
   the starting candidate again. The cheat's verdict and the sdpa baseline's time at each
   shape before and after it; beside them, what sdpa takes in this process with the
   fused backends off (what the cheat would have made the baseline).
2. The timer: the starting rmsnorm kernel timed by the verifier's GPU timer, then the
   kernel of tests/cheats/patches_timer_functions.py timed the same way after that
   module's patches (torch.cuda.Event, time.perf_counter, torch.cuda.synchronize,
   triton.testing, statistics) ran in this process, and what torch.cuda.Event reads
   after them; then the cheat's verdict from a worker.

Prints a short table per part; exits 1 if a wall did not hold (a baseline moved beyond
10 %, the patched kernel's time beyond 10 %, or a cheat's verdict was not anti-cheat).
`--gpu-only-timer` runs part 2 alone (a minute less).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
CHEATS = ROOT / "tests" / "cheats"
TOLERANCE = 0.10


def _verify(op: str, source: str) -> Any:
    from kernelladder.verifier.host.client import LocalTransport, WorkerClient

    async def run() -> Any:
        client = WorkerClient(lambda: LocalTransport("cuda"), secrets=[])
        try:
            return await client.verify(
                {"op": op, "source": source, "device": "cuda"}, timeout_s=900
            )
        finally:
            await client.close()

    return asyncio.run(run())


def _sdpa_ms(verdict: Any) -> dict[str, float]:
    return {
        t.label: float(t.baselines_ms["sdpa"])
        for t in verdict.timings
        if isinstance(t.baselines_ms.get("sdpa"), float)
    }


def _sdpa_math_only_ms(shapes: list[Any]) -> dict[str, float]:
    """sdpa at each shape in this process, with the fused backends off (then on again)."""
    from kernelladder.ops.registry import get_op
    from kernelladder.verifier.worker.timing import GpuTimer

    spec, timer = get_op("attention"), GpuTimer("cuda")
    out = {}
    toggles = (
        torch.backends.cuda.enable_flash_sdp,
        torch.backends.cuda.enable_mem_efficient_sdp,
        torch.backends.cuda.enable_cudnn_sdp,
    )
    for shape in shapes:
        inputs = spec.make_inputs(shape, 0, "cuda")
        fn = spec.library_baselines()["sdpa"]
        for toggle in toggles:
            toggle(False)
        try:
            out[shape.label] = timer.time(lambda i=inputs, f=fn: f(i)).median_ms
        except Exception as exc:  # the math backend may not fit the largest shapes
            print(f"  (sdpa, math backend only, at {shape.label}: {type(exc).__name__})")
        finally:
            for toggle in toggles:
                toggle(True)
        del inputs
        torch.cuda.empty_cache()
    return out


def attention_baselines() -> bool:
    from kernelladder.ops.registry import get_op

    spec = get_op("attention")
    start = Path(spec.starting_candidate).read_text()
    cheat = (CHEATS / "attention_sdpa_off.py").read_text()
    print("1. attention: sdpa's baseline around a candidate that turns its fused backends off")
    before = _verify("attention", start)
    verdict = _verify("attention", cheat)
    after = _verify("attention", start)
    slow = _sdpa_math_only_ms(list(spec.gpu_shapes))
    detail = verdict.gates[verdict.gate].detail if verdict.gate else ""
    print(f"  the cheat's verdict: {verdict.verdict} at {verdict.gate}: {detail[:300]}")
    b, a = _sdpa_ms(before), _sdpa_ms(after)
    print(f"  {'shape':30s} {'sdpa before':>12s} {'sdpa after':>12s} {'after/before':>13s} "
          f"{'math only':>10s}")  # fmt: skip
    held = verdict.gate == "anti-cheat"
    for label in b:
        ratio = a.get(label, float("nan")) / b[label]
        held &= abs(ratio - 1.0) <= TOLERANCE
        math_only = slow.get(label)
        print(
            f"  {label:30s} {b[label]:10.4f}ms {a.get(label, float('nan')):10.4f}ms "
            f"{ratio:13.3f} " + (f"{math_only:8.4f}ms" if math_only else "       n/a")
        )
    print(f"  held: {held}")
    return held


def timer_truth() -> bool:
    from kernelladder.ops.registry import get_op
    from kernelladder.ops.spec import Shape
    from kernelladder.verifier.worker.timing import GpuTimer

    print("2. the timer: a candidate's kernel timed after its patches to the timing functions")
    spec = get_op("rmsnorm")
    shape = Shape("16384x8192 bf16", {"M": 16384, "N": 8192}, "bfloat16")
    inputs = spec.make_inputs(shape, 0, "cuda")
    args = (inputs["x"], inputs["weight"])
    honest_spec = importlib.util.spec_from_file_location("start", spec.starting_candidate)
    honest = importlib.util.module_from_spec(honest_spec)
    honest_spec.loader.exec_module(honest)
    true_ms = GpuTimer("cuda").time(lambda: honest.kernel(*args)).median_ms
    cheat_spec = importlib.util.spec_from_file_location(
        "patches_timer_functions", CHEATS / "patches_timer_functions.py"
    )
    cheat = importlib.util.module_from_spec(cheat_spec)
    cheat_spec.loader.exec_module(cheat)  # its patches run here, as in a worker
    patched_ms = GpuTimer("cuda").time(lambda: cheat.kernel(*args)).median_ms
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    cheat.kernel(*args)
    end.record()
    torch.cuda.synchronize()
    naive_ms = start.elapsed_time(end)
    verdict = _verify("rmsnorm", (CHEATS / "patches_timer_functions.py").read_text())
    ratio = patched_ms / true_ms
    held = abs(ratio - 1.0) <= TOLERANCE and verdict.gate == "anti-cheat"
    print(f"  {'what':52s} {'ms':>10s}")
    print(f"  {'the honest kernel, the verifier timer':52s} {true_ms:10.4f}")
    print(
        f"  {'the patching kernel, after its patches, the verifier timer':52s} {patched_ms:10.4f}"
    )
    print(f"  {'the patching kernel, after its patches, torch.cuda.Event':52s} {naive_ms:10.4f}")
    print(f"  patched / honest {ratio:.3f}; the cheat's verdict: {verdict.verdict} at "
          f"{verdict.gate}: {verdict.gates[verdict.gate].detail[:200] if verdict.gate else ''}")  # fmt: skip
    print(f"  held: {held}")
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-only-timer", action="store_true", help="part 2 alone")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("judge_walls: needs a CUDA GPU (nothing measured)")
        return 2
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    held = True
    if not args.gpu_only_timer:
        held &= attention_baselines()
    held &= timer_truth()  # last: its patches stay in this process
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
