#!/usr/bin/env python3
"""Head-to-head: a search run's kernels against every library baseline, interleaved.

A verification times the candidate once and reuses baselines timed earlier in the same
worker, so a margin smaller than the drift between those moments is not a result. Here
each round times the candidate and every baseline back to back (the order rotating each
round) with the verifier's timer, and the verdict per shape comes from the per-round
ratios: "faster" when the candidate won at least `--win` of the rounds (a sign test over
rounds; 13 of 15 has p < 0.01 against a coin flip), "slower" when it lost as many,
else "tie". Needs a GPU.

    PYTHONPATH=. python3 bench/head_to_head.py RUN_DIR [RUN_DIR ...] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from search_bar import faster_everywhere  # noqa: E402  (bench/, beside this script)

from kernelladder.engine import fold, read_events, summarize  # noqa: E402
from kernelladder.ops.registry import get_op  # noqa: E402
from kernelladder.verifier.worker import candidate  # noqa: E402
from kernelladder.verifier.worker.timing import GpuTimer  # noqa: E402


def sign_test_p(wins: int, rounds: int) -> float:
    """One-sided p of at least `wins` heads in `rounds` fair coin flips."""
    return sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds


def picks(run_dir: Path, limit: int) -> list[int]:
    """The run's best attempt, then passing attempts that beat every baseline at every
    shape in their own verdict, fastest on the largest shape first."""
    summary = summarize(fold(read_events(run_dir)))
    best = (summary.get("best") or {}).get("attempt")
    winners = []
    for attempt, ts in faster_everywhere(run_dir):
        largest = max(ts, key=lambda t: t.get("floor_ms") or 0)
        winners.append((largest["candidate_ms"], attempt))
    out = [best] if best else []
    out += [n for _, n in sorted(winners) if n not in out]
    return out[:limit]


class HeadToHead:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.timer = GpuTimer("cuda")
        self.scratch = tempfile.mkdtemp(prefix="kl-h2h-")
        self.record: list[dict] = []
        self.lines: list[str] = []
        self._compiled: dict[str, object] = {}

    def measure(self, run_dir: Path, op_name: str, attempt: int, rounds: int, tag: str) -> dict:
        """Rounds of kernel vs baselines at every GPU shape; {(shape, baseline): won}."""
        args, timer = self.args, self.timer
        spec = get_op(op_name)
        compiled = self._compiled.setdefault(op_name, torch.compile(spec.reference, dynamic=False))
        source = (run_dir / "attempts" / f"{attempt}.py").read_text()
        loaded = candidate.load(source, spec, self.scratch, "cuda", f"h2h{attempt:08d}{tag}")
        lines = self.lines
        lines.append(f"\n{op_name} #{attempt} ({run_dir.name}; {rounds} rounds{tag})")
        lines.append("| shape | kernel ms | baseline | baseline ms | ratio | won | verdict |")
        lines.append("|---|---|---|---|---|---|---|")
        wins: dict = {}
        for shape in spec.gpu_shapes:
            inputs = spec.make_inputs(shape, 0, "cuda")
            args_ = [inputs[n] for n in spec.arg_names]
            out = loaded.call(*args_)
            torch.cuda.synchronize()
            outs = out if isinstance(out, tuple | list) else (out,)
            bad = spec.compare(list(outs), spec.reference_hp(inputs), inputs, shape)
            if bad is not None:
                lines.append(f"| {shape.label} | WRONG: {bad} | | | | | |")
                wins[(shape.label, "*")] = -1
                continue
            fns = {"kernel": lambda a=args_, c=loaded.call: c(*a)}
            for name, fn in spec.library_baselines().items():
                fns[name] = lambda fn=fn, i=inputs: fn(i)
            fns["torch.compile"] = lambda i=inputs, c=compiled: c(dict(i))
            names = list(fns)
            samples: dict[str, list[float]] = {n: [] for n in names}
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for n in order:
                    try:
                        samples[n].append(timer.time(fns[n], args.target_ms).median_ms)
                    except Exception as exc:  # a baseline that cannot run here
                        samples[n].append(math.nan)
                        print(f"{shape.label} {n}: {type(exc).__name__}: {exc}"[:200])
            k_med = statistics.median(samples["kernel"])
            for n in names[1:]:
                pairs = [
                    (k, b)
                    for k, b in zip(samples["kernel"], samples[n], strict=True)
                    if not (math.isnan(k) or math.isnan(b))
                ]
                if not pairs:
                    continue
                need = math.ceil(args.win * len(pairs) / args.rounds)
                won = sum(1 for k, b in pairs if k < b)
                lost = sum(1 for k, b in pairs if k > b)
                verdict = "faster" if won >= need else "slower" if lost >= need else "tie"
                wins[(shape.label, n)] = won
                b_med = statistics.median(b for _, b in pairs)
                lines.append(
                    f"| {shape.label} | {k_med:.4f} | {n} | {b_med:.4f} | "
                    f"{statistics.median(k / b for k, b in pairs):.3f} | "
                    f"{won}/{len(pairs)} | {verdict} |"
                )
                self.record.append(
                    {
                        "run": str(run_dir),
                        "op": op_name,
                        "attempt": attempt,
                        "pass": tag.strip(", ") or "first",
                        "shape": shape.label,
                        "baseline": n,
                        "kernel_ms": samples["kernel"],
                        "baseline_ms": samples[n],
                        "won": won,
                        "rounds": len(pairs),
                        "p_faster": sign_test_p(won, len(pairs)),
                        "verdict": verdict,
                    }
                )
            print("\n".join(lines[-len(names) + 1 :]), flush=True)
        candidate.unload(loaded.module_name)
        return wins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--win", type=int, default=13, help="rounds won (of --rounds) to call it faster"
    )
    parser.add_argument("--attempts", type=int, default=3, help="kernels per run")
    parser.add_argument("--attempt", type=int, action="append", help="these attempts only")
    parser.add_argument(
        "--confirm",
        type=int,
        default=0,
        help="then time the kernel with the most rounds won at its worst shape again, "
        "this many rounds (a fresh measurement of the one picked)",
    )
    parser.add_argument("--target-ms", type=float, default=25.0, help="per timing")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    h2h = HeadToHead(args)
    for run_dir in args.run_dirs:
        op_name = summarize(fold(read_events(run_dir)))["op"]
        chosen = args.attempt or picks(run_dir, args.attempts)
        scores = {}
        for attempt in chosen:
            wins = h2h.measure(run_dir, op_name, attempt, args.rounds, "")
            scores[attempt] = (min(wins.values(), default=-1), sum(wins.values()))
        if args.confirm and scores:
            pick = max(scores, key=lambda a: scores[a])
            h2h.measure(run_dir, op_name, pick, args.confirm, ", confirmation")
    if args.json:
        args.json.write_text(json.dumps(h2h.record, indent=1))
    print("\n".join(h2h.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
