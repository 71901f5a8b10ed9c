"""What one verification is asked and what it gives back: the request's options, parsed
once (VerifyOptions), the Outcome, and the callbacks a worker hands a verification
(progress lines; entering a pipelined stage)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernelladder.verifier.contract.verdict import Verdict
from kernelladder.verifier.worker.speed_gate import PAIRED_ROUNDS

DEFAULT_SEEDS = {"cuda": (0, 1, 2), "cpu": (0, 1)}

ProgressFn = Callable[[str, str], None]
# (stage, "none" | "shared" | "exclusive") -> what other workers on this GPU measured
# since the request ("known", as VerifyOptions.known), or None
StageFn = Callable[[str, str], Any]


@dataclass(frozen=True)
class VerifyOptions:
    op: Any  # wire form: built-in name or {"kernelbench": source, "name": file name}
    source: str
    device: str = "cpu"
    min_speedup: float = 1.0
    suite: str | None = None
    seeds: tuple[int, ...] | None = None
    baselines: bool = True
    # a re-measure (the engine's confirmation of a run's best): this many back-to-back
    # rounds, with the fastest baseline at every shape, not only the close ones
    paired_rounds: int = PAIRED_ROUNDS
    pair_every_shape: bool = False
    # stop the rounds once their word is settled, after at least this many (None: all)
    paired_min_rounds: int | None = None
    unseen_shapes: int | None = None  # how many (None: the op's count; 0: none)
    unseen_seed: int | None = None  # None: a fresh one, recorded in the verdict
    # pipelined: compile ahead, then ask the client for the GPU per stage (shared for
    # correctness, to itself for timing); reference times cached and refreshed
    pipeline: bool = False
    # the branch's best, for stopping the timing early ({"attempt": N, "timings":
    # {shape label: ms}, "noise": float}); None: time every shape in full
    early_stop: dict[str, Any] | None = None
    # what other workers on this GPU measured (gpu_arbiter.GpuFacts.known): rates, and
    # per shape the reference's and baselines' times with their age
    known: dict[str, Any] | None = None

    @classmethod
    def from_request(cls, msg: Mapping[str, Any], default_device: str) -> VerifyOptions:
        seeds = msg.get("seeds")
        unseen, unseen_seed = msg.get("unseen_shapes"), msg.get("unseen_seed")
        return cls(
            op=msg.get("op"),
            source=str(msg.get("source") or ""),
            device=str(msg.get("device") or default_device),
            min_speedup=float(
                msg.get("min_speedup") if msg.get("min_speedup") is not None else 1.0
            ),
            suite=msg.get("suite"),
            seeds=tuple(int(s) for s in seeds) if seeds else None,
            baselines=bool(msg.get("baselines", True)),
            paired_rounds=max(1, int(msg.get("paired_rounds") or PAIRED_ROUNDS)),
            pair_every_shape=bool(msg.get("pair_every_shape", False)),
            paired_min_rounds=(
                max(1, int(msg["paired_min_rounds"])) if msg.get("paired_min_rounds") else None
            ),
            unseen_shapes=int(unseen) if unseen is not None else None,
            unseen_seed=int(unseen_seed) if unseen_seed is not None else None,
            pipeline=bool(msg.get("pipeline", False)),
            early_stop=msg.get("early_stop"),
            known=dict(msg["known"]) if isinstance(msg.get("known"), Mapping) else None,
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "early_stop", _early_stop_option(self.early_stop))


def _early_stop_option(value: Any) -> dict[str, Any] | None:
    """The request's early_stop, checked: the best's attempt and its time per shape."""
    if not isinstance(value, Mapping):
        return None
    timings = value.get("timings")
    if not isinstance(timings, Mapping):
        return None
    times = {str(k): float(v) for k, v in timings.items() if isinstance(v, int | float) and v > 0}
    if not times:
        return None
    noise = value.get("noise")
    if isinstance(noise, Mapping):  # per shape
        spread = {str(k): float(v) for k, v in noise.items() if isinstance(v, int | float)}
    else:  # one figure for every shape
        spread = {k: float(noise) if isinstance(noise, int | float) else 0.0 for k in times}
    return {"attempt": value.get("attempt"), "timings": times, "noise": spread}


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    recycle: bool = False  # the candidate altered the worker: it exits after the verdict
    # the candidate defined operators of its own: the worker is replaced after the verdict
    # (the next candidate finds torch as it was), whatever the verdict
    retire: bool = False
