#!/usr/bin/env python3
"""Attention probe: points of the search's attention families (the pointer kernel
"flash-split" and the tensor-descriptor kernel "flash-tma") against SDPA at every GPU
shape of the suite, round by round (order alternating), as in head_to_head.py. Needs a GPU.

    PYTHONPATH=. python3 bench/attention_probe.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelladder.engine.proposers.templates import attention as templates  # noqa: E402
from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier import candidate  # noqa: E402
from kernelladder.verifier.timing import GpuTimer  # noqa: E402

STARTED = time.monotonic()

# (family, BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES)
POINTS = [
    ("flash-split", 128, 64, 8, 3),
    ("flash-split", 128, 128, 8, 2),
    ("flash-split", 128, 128, 8, 3),
    ("flash-tma", 128, 64, 8, 3),
    ("flash-tma", 128, 64, 8, 4),
    ("flash-tma", 128, 128, 8, 2),
    ("flash-tma", 128, 128, 8, 3),
    ("flash-tma", 128, 64, 4, 3),
    ("flash-tma", 64, 64, 4, 3),
    ("flash-tma", 64, 64, 4, 4),
]


def log(*parts) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s]", *parts, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target-ms", type=float, default=15.0)
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    spec = get_op("attention")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-attn-probe-")
    families = {f.name: f for f in templates.FAMILIES}
    shapes = list(spec.gpu_shapes)
    inputs = {s.label: spec.make_inputs(s, 0, "cuda") for s in shapes}
    sdpa = spec.library_baselines()["sdpa"]
    record: dict = {}
    rows = []
    for i, (fam, bm, bn, warps, stages) in enumerate(POINTS):
        family = families[fam]
        point = {**family.start, "BLOCK_M": bm, "BLOCK_N": bn, "NUM_WARPS": warps}
        point["NUM_STAGES"] = stages
        label = f"{fam} m{bm} n{bn} w{warps} s{stages}"
        try:
            loaded = candidate.load(family.render(point), spec, scratch, "cuda", f"ap{i:04d}")
        except Exception as exc:
            log(label, "LOAD FAILED", type(exc).__name__, str(exc).splitlines()[0][:160])
            continue
        cells = []
        for s in shapes:
            inp = inputs[s.label]
            args_ = [inp[n] for n in spec.arg_names]
            try:
                out = loaded.call(*args_)
                torch.cuda.synchronize()
            except Exception as exc:
                log(label, s.label, "FAILED", type(exc).__name__, str(exc).splitlines()[0][:160])
                cells.append("FAILED")
                continue
            outs = out if isinstance(out, tuple | list) else (out,)
            bad = spec.compare(list(outs), spec.reference_hp(inp), inp, s)
            if bad is not None:
                log(label, s.label, "WRONG", bad)
                cells.append("WRONG")
                continue
            ks, bs = [], []
            for r in range(args.rounds):
                order = [("k", lambda a=args_, c=loaded.call: c(*a)), ("b", lambda i=inp: sdpa(i))]
                for who, fn in order if r % 2 == 0 else order[::-1]:
                    (ks if who == "k" else bs).append(timer.time(fn, args.target_ms).median_ms)
            ratio = statistics.median(b / k for k, b in zip(ks, bs, strict=True))
            won = sum(1 for k, b in zip(ks, bs, strict=True) if k < b)
            record[f"{label} | {s.label}"] = {"kernel_ms": ks, "sdpa_ms": bs}
            cells.append(f"{statistics.median(ks):.4f} ({ratio:.2f}x, {won}/{args.rounds})")
            log(f"{label:32s} {s.label:28s} {cells[-1]}  sdpa {statistics.median(bs):.4f}")
        candidate.unload(loaded.module_name)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    (out_dir / "attention_probe.json").write_text(json.dumps(record, indent=1))
    print("\ncells: kernel ms (SDPA time / kernel time, rounds won against SDPA)")
    print("| point | " + " | ".join(s.label for s in shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
