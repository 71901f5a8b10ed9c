#!/usr/bin/env python3
"""Attention probe: points of the search's attention families (the pointer kernel
"flash-split" and the tensor-descriptor kernel "flash-tma") against SDPA at every GPU
shape of the suite, round by round (order alternating), as in head_to_head.py. Needs a GPU.

    PYTHONPATH=. python3 bench/archive/2026-11-30-attention-search/attention_points.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository (bench/archive/<dir>/ is three down)
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


def _parse_point(text: str) -> tuple:
    fam, bm, bn, warps, stages, *rest = text.split(",")
    fixed = {}
    for item in rest:
        name, value = item.split("=", 1)
        fixed[name] = {"True": True, "False": False}.get(value, value)
    return fam, int(bm), int(bn), int(warps), int(stages), fixed


def _time_backends(spec, shapes, inputs, timer, target_ms) -> None:
    """Which SDPA backend the plain call picks: each backend timed alone at each shape."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    f = torch.nn.functional.scaled_dot_product_attention
    for s in shapes:
        call = functools.partial(f, *(inputs[s.label][n] for n in spec.arg_names), is_causal=True)
        cells = []
        for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", None):
            name = backend or "default"
            try:
                if backend is None:
                    ms = timer.time(call, target_ms).median_ms
                else:
                    with sdpa_kernel(getattr(SDPBackend, backend)):
                        call()
                        ms = timer.time(call, target_ms).median_ms
                cells.append(f"{name} {ms:.4f}")
            except Exception as exc:  # a backend that does not take this shape or dtype
                cells.append(f"{name} n/a ({type(exc).__name__})")
        log(f"sdpa backends {s.label:28s}", " | ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target-ms", type=float, default=15.0)
    parser.add_argument(
        "--point",
        action="append",
        default=[],
        help="FAMILY,BLOCK_M,BLOCK_N,WARPS,STAGES[,NAME=VALUE...] instead of the built-in "
        "points; NAME=VALUE overrides a constant the family fixes (e.g. REVERSE=True)",
    )
    parser.add_argument(
        "--backends", action="store_true", help="also time each SDPA backend at each shape"
    )
    args = parser.parse_args()
    points = [_parse_point(text) for text in args.point] or [(*p, {}) for p in POINTS]
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
    if args.backends:
        _time_backends(spec, shapes, inputs, timer, args.target_ms)
    for i, (fam, bm, bn, warps, stages, fixed) in enumerate(points):
        family = families[fam]
        point = {**family.start, "BLOCK_M": bm, "BLOCK_N": bn, "NUM_WARPS": warps}
        point["NUM_STAGES"] = stages
        label = f"{fam} m{bm} n{bn} w{warps} s{stages}" + "".join(
            f" {k}={v}" for k, v in fixed.items()
        )
        source = family.render(point)
        for name, value in fixed.items():
            line = f"{name} = {family.fixed[name]!r}  # fixed by the family"
            assert line in source, f"{fam} fixes no {name}"
            source = source.replace(line, f"{name} = {value!r}  # set by the probe")
        try:
            loaded = candidate.load(source, spec, scratch, "cuda", f"ap{i:04d}")
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
