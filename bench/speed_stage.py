#!/usr/bin/env python3
"""Where one verification's speed stage spends its time (issue 25): a candidate verified
in this process, as a pipelined worker verifies it, a few times over, and for the last
of them: the stage's wall clock, the timer's timings (how many, their wall, and how much
of it was trials: the flushed, timed launches themselves), and the verifier's functions
by their own time (cProfile), so the overhead around the trials has a name.

--parts: the correctness stage's parts, each timed with the GPU synchronized before and
after (inclusive, so a part holds the parts it calls): drawing the inputs, the
high-precision reference, the candidate's own call, the checks around it (poisoned
memory, the integrity snapshot's comparison, side work, the anti-cheat checks), the
comparison with the reference. The synchronizations add a little to every part.

    python3 bench/speed_stage.py [--ops rmsnorm softmax attention] [--repeat 3]
                                 [--attempt N] [--paired-min-rounds N] [--device cpu]
                                 [--parts]

Each op's candidate is the best attempt of its committed H200 example run (or --attempt
N of it). Writes speed_stage.json under --out (default $OUT, else ./speed-stage-out) and
prints a short table last. Needs a GPU (`--device cpu`: a dry run in the interpreter, nothing timed).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def example_run(op: str) -> Path:
    """The op's committed GPU search (examples/h100-OP-search, "_" written "-")."""
    return ROOT / "examples" / f"h100-{op.replace('_', '-')}-search"


def best_attempt(run: Path) -> int:
    """The run's best: its last BestConfirmed's attempt, else its last BestImproved's."""
    best = None
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") in ("best_improved", "best_confirmed") and e.get("attempt"):
            best = int(e["attempt"])
    if best is None:
        raise SystemExit(f"speed_stage: no best in {run}")
    return best


class TimerCalls:
    """GpuTimer.time_planned (every timing) and GpuTimer._measure wrapped: timings, their
    wall, and the trials' own time."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.time_calls = 0
        self.time_wall = 0.0
        self.measure_calls = 0
        self.trial_ms = 0.0  # the sum of the timed trials' CUDA-event times

    def install(self) -> None:
        from kernelladder.verifier.worker import timing

        orig_time, orig_measure = timing.GpuTimer.time_planned, timing.GpuTimer._measure
        calls = self

        def time_(self_: Any, fn: Any, target_ms: float, plan: dict) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_time(self_, fn, target_ms, plan)
            finally:
                calls.time_calls += 1
                calls.time_wall += time.perf_counter() - t0

        def measure(
            self_: Any, fn: Any, trials: int, sleep_cycles: int = 0, lead_cycles: int = 0
        ) -> list[float]:
            out = orig_measure(self_, fn, trials, sleep_cycles, lead_cycles)
            calls.measure_calls += 1
            calls.trial_ms += sum(out)
            return out

        timing.GpuTimer.time_planned = time_  # type: ignore[method-assign]
        timing.GpuTimer._measure = measure  # type: ignore[method-assign]


class StageClock:
    """The verifier's stage callback (`verify(..., stage=clock.enter)`): each stage's
    seconds, from its start to the next stage's; done() closes the last."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self._at = time.perf_counter()
        self._name: str | None = None

    def enter(self, name: str, gpu: str = "none") -> None:
        now = time.perf_counter()
        if self._name is not None:
            self.stages[self._name] = self.stages.get(self._name, 0.0) + now - self._at
        self._at, self._name = now, name

    def done(self) -> dict[str, float]:
        self.enter("")
        self._name = None
        return self.stages


TRIALS = "correctness trials (all)"


class StageParts:
    """The correctness stage's parts, timed (inclusive) with the GPU synchronized around
    each: seconds and calls per part, for the run in progress."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.depth = 0

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        import torch

        original = getattr(owner, attr)
        parts = self
        cuda = torch.cuda.is_available()

        outer = name == TRIALS

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not outer and not parts.depth:  # compiling ahead, the speed stage: not counted
                return original(*args, **kwargs)
            parts.depth += outer
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if cuda:
                    torch.cuda.synchronize()
                parts.seconds[name] = parts.seconds.get(name, 0.0) + time.perf_counter() - t0
                parts.calls[name] = parts.calls.get(name, 0) + 1
                parts.depth -= outer

        setattr(owner, attr, timed)

    def install(self) -> None:
        """Before any verification (the integrity snapshot sees the wrapped methods)."""
        from kernelladder.ops import _common
        from kernelladder.ops.spec import OpSpec
        from kernelladder.verifier.worker import candidate, candidate_run, integrity, poison
        from kernelladder.verifier.worker.anti_cheat import AntiCheatChecks
        from kernelladder.verifier.worker.correctness import CorrectnessTrials

        run = candidate_run.CandidateRun
        self.wrap(CorrectnessTrials, "_trials", TRIALS)
        self.wrap(run, "_checked_call", "checked call (all)")
        load = candidate.load

        def load_timed(*args: Any, **kwargs: Any) -> Any:
            loaded = load(*args, **kwargs)
            self.wrap(loaded, "call", "candidate's call")
            return loaded

        candidate.load = load_timed
        self.wrap(poison, "poison_before_call", "poisoned memory")
        self.wrap(integrity, "altered", "integrity comparison")
        self.wrap(candidate_run, "device_healthy", "device healthy (sync)")
        self.wrap(AntiCheatChecks, "_outputs", "outputs checked")
        self.wrap(AntiCheatChecks, "_side_work", "side work")
        self.wrap(AntiCheatChecks, "_anti_cheat_after_call", "anti-cheat after call")
        self.wrap(CorrectnessTrials, "_judge", "judged (compare)")
        self.wrap(_common, "compare_floats", "compare_floats")
        for spec_cls in _subclasses(OpSpec):
            for attr, name in (("make_inputs", "inputs drawn"), ("reference_hp", "reference hp")):
                if attr in vars(spec_cls):
                    self.wrap(spec_cls, attr, name)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ops = ("rmsnorm", "softmax", "attention", "kv_quant", "int8_matmul")
    ap.add_argument("--ops", nargs="+", default=list(ops[:3]), choices=ops)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--attempt", type=int, default=None)
    ap.add_argument("--paired-min-rounds", type=int, default=None)
    ap.add_argument("--device", default="cuda", help="cpu: the interpreter (a dry run)")
    ap.add_argument("--parts", action="store_true", help="time the correctness stage's parts")
    ap.add_argument("--out", default=os.environ.get("OUT") or "speed-stage-out")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("speed_stage: needs a GPU (torch.cuda.is_available() is False)")
        return 2
    from kernelladder.verifier.worker import fence, selftest
    from kernelladder.verifier.worker.gates import Verifier, environment_info
    from kernelladder.verifier.worker.options import VerifyOptions

    fence.install_launch_counter()
    selftest.warm_compilers(args.device)
    calls = TimerCalls()
    calls.install()
    parts = StageParts()
    if args.parts:
        from kernelladder.ops import registry  # every built-in spec class imported

        registry.builtin_ops()
        parts.install()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    scratch = tempfile.mkdtemp(prefix="kl-speed-stage-")
    verifier = Verifier(args.device, scratch, environment_info(args.device))
    for op in args.ops:
        run = example_run(op)
        n = args.attempt or best_attempt(run)
        source = (run / "attempts" / f"{n}.py").read_text()
        opts = VerifyOptions(
            op=op,
            source=source,
            device=args.device,
            min_speedup=0.0,
            pipeline=True,
            paired_min_rounds=args.paired_min_rounds,
        )
        rows = []
        for i in range(args.repeat):
            clock = StageClock()
            calls.reset()
            parts.reset()
            prof = cProfile.Profile() if i == args.repeat - 1 else None
            t0 = time.perf_counter()
            with prof if prof is not None else contextlib.nullcontext():
                outcome = verifier.verify(opts, stage=clock.enter)
            wall = time.perf_counter() - t0
            stages = clock.done()
            v = outcome.verdict
            speed = v.gates.get("speed")
            per_shape = (speed.evidence or {}).get("per_shape", []) if speed else []
            rounds = sum(((s.get("paired") or {}).get("rounds") or 0) for s in per_shape)
            row = {
                "verdict": v.verdict,
                "wall_s": round(wall, 3),
                "stages_s": {k: round(x, 3) for k, x in stages.items()},
                "timer_time_calls": calls.time_calls,
                "timer_time_wall_s": round(calls.time_wall, 3),
                "measure_calls": calls.measure_calls,
                "trials_s": round(calls.trial_ms / 1e3, 3),
                "rounds": rounds,
                "words": [(s.get("paired") or {}).get("verdict") for s in per_shape],
            }
            if args.parts:
                row["parts_s"] = {k: round(x, 4) for k, x in parts.seconds.items()}
                row["parts_calls"] = dict(parts.calls)
            if prof is not None:
                buf = io.StringIO()
                st = pstats.Stats(prof, stream=buf)
                st.sort_stats("tottime").print_stats(25)
                row["profile_tottime"] = buf.getvalue()
                buf = io.StringIO()
                st = pstats.Stats(prof, stream=buf)
                st.sort_stats("cumulative").print_stats("kernelladder", 40)
                row["profile_cumulative"] = buf.getvalue()
            rows.append(row)
            print(op, i, {k: row[k] for k in row if not k.startswith("profile")}, flush=True)
        results[op] = {"attempt": n, "runs": rows}
    (out / "speed_stage.json").write_text(json.dumps(results, indent=1))
    for op, r in results.items():
        print(f"\n=== {op} #{r['attempt']}: cProfile, last run, by own time")
        print(r["runs"][-1]["profile_tottime"][:6000])
        print(f"=== {op}: cumulative, kernelladder only")
        print(r["runs"][-1]["profile_cumulative"][:6000])
    if args.parts:
        names = sorted({k for r in results.values() for k in r["runs"][-1].get("parts_s", {})})
        print("\ncorrectness stage's parts, last run, s (calls)")
        print(f"{'part':28}" + "".join(f"{op[:12]:>16}" for op in results))
        for name in names:
            cells = []
            for r in results.values():
                last = r["runs"][-1]
                sec = last.get("parts_s", {}).get(name)
                n = last.get("parts_calls", {}).get(name, 0)
                cells.append(f"{sec:9.3f} ({n:3d})" if sec is not None else f"{'-':>16}")
            print(f"{name:28}" + "".join(f"{c:>16}" for c in cells))
    print(f"\n{'op':12} {'wall s':>7} {'speed s':>8} {'timings':>9} {'timing s':>9} "
          f"{'trials s':>9} {'rounds':>7}")  # fmt: skip
    for op, r in results.items():
        last = r["runs"][-1]
        print(
            f"{op:12} {last['wall_s']:7.2f} {last['stages_s'].get('speed', 0):8.2f} "
            f"{last['timer_time_calls']:9d} {last['timer_time_wall_s']:9.2f} "
            f"{last['trials_s']:9.2f} {last['rounds']:7d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
