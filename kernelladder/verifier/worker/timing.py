"""GPU timing: L2 flushed between trials, CUDA events, device-wide sync, medians.

Only the verifier's private references (integrity.TRUSTED, torch._C's own event, stream,
synchronize and sleep, captured before any candidate) are used, and the medians are
taken here with builtins alone, so a candidate that patches torch.cuda.Event,
synchronize, time.perf_counter, triton.testing or statistics still gets its true time
(and fails at anti-cheat for the patch). The measured ceilings (copy bandwidth, matmul
rates) are taken once per worker and cached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.verifier.worker.integrity import TRUSTED

# The L2 flush before each trial: a write of FLUSH_L2_MULTIPLE times the GPU's L2, within
# [MIN_FLUSH_BYTES, COUNTED_FLUSH_BYTES]. On the H200 (60 MiB of L2) 120 and 128 MiB left
# every timed call within 2 % of its time after 256 MiB, as 512 MiB did: no call warmer
# (bench/timer_trials.py, 2026-12-03).
COUNTED_FLUSH_BYTES = 256 * 1024 * 1024  # the flush the trial counts were set with
FLUSH_L2_MULTIPLE = 2
MIN_FLUSH_BYTES = 64 * 1024 * 1024
TARGET_MS = 100.0  # of trials per function and shape (counted as GpuTimer.plan_trials says)
MIN_TRIALS = 10
MAX_TRIALS = 2000
# Cycles of GPU busy-wait queued before each trial's start event, so the host enqueues the
# timed launches while the GPU waits: the events then bracket GPU work, not Python launch
# latency (which made launch-bound shapes vary by tens of percent between checks).
_GPU_SLEEP = TRUSTED.cuda_sleep  # torch._C's, bound at import, before any candidate
SLEEP_CYCLES_PER_MS = 2_000_000  # H100/H200 SM clocks run near 2 GHz under load
MAX_SLEEP_CYCLES = 4_000_000
PROBE_SLEEP_CYCLES = 200_000  # 0.1 ms: covers the launch of a kernel or two
# The quiet gap before each trial's start event, in ms; None: twice the host's enqueue
# time and 20 us (what hides one launch from an idle GPU, the gap until 2026-12-03). Where
# the host stays ahead on its own (a trial's flush, gap and call outlast its enqueueing by
# LEAD_MARGIN), a fixed gap is enough once one sleep of LEAD_TRIALS such launches has put
# the host ahead. On the H200, 40 us gave every candidate and baseline of the five ops
# the old way's times within 1.5 % (the old way's own spread for the noisiest calls; 0.7 %
# for the candidates but int8's largest shape), at 0.38-0.88 of the GPU time per trial;
# 20 us moved some by 2.7 %, 10 us by 5 %, no gap (flush, then the call) by 5.6 %
# (bench/timer_trials.py, 2026-12-03).
TRIAL_GAP_MS: float | None = 0.04
LEAD_MARGIN = 1.5
LEAD_TRIALS = 4


def flush_bytes_for(l2_bytes: int | None) -> int:
    """The flush's size for a GPU with this much L2 (COUNTED_FLUSH_BYTES when unknown)."""
    if not l2_bytes:
        return COUNTED_FLUSH_BYTES
    return int(min(COUNTED_FLUSH_BYTES, max(MIN_FLUSH_BYTES, FLUSH_L2_MULTIPLE * l2_bytes)))


@dataclass(frozen=True)
class Timing:
    median_ms: float
    noise: float  # interquartile range / median
    trials: int
    # every trial's time (ms), kept so timings of one function can be pooled
    samples: tuple[float, ...] = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"median_ms": self.median_ms, "noise": self.noise, "trials": self.trials}


def median(values: Sequence[float]) -> float:
    """The median (as statistics.median), with builtins alone: a candidate that patches
    the statistics module cannot move a time."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    half = n // 2
    return ordered[half] if n % 2 else (ordered[half - 1] + ordered[half]) / 2


def quartiles(ordered: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles of sorted values (as statistics.quantiles(n=4),
    its default "exclusive" method), with builtins alone."""
    n = len(ordered)
    out = []
    for i in (1, 3):
        j = min(max(i * (n + 1) // 4, 1), n - 1)
        delta = i * (n + 1) - j * 4
        out.append((ordered[j - 1] * (4 - delta) + ordered[j] * delta) / 4)
    return out[0], out[1]


def summarize(samples: Sequence[float]) -> Timing:
    ordered = sorted(samples)
    mid = median(ordered)
    if len(ordered) >= 4:
        q1, q3 = quartiles(ordered)
        iqr = q3 - q1
    else:
        iqr = ordered[-1] - ordered[0]
    return Timing(mid, iqr / mid if mid > 0 else math.inf, len(ordered), tuple(samples))


def pooled(parts: Sequence[Timing]) -> Timing:
    """One function's timings taken apart (a first look, then more trials or the rounds
    against a baseline) as one: the median and spread of all their trials together. A
    timer that keeps no samples (a test's table of times) pools its medians by trials."""
    if all(p.samples for p in parts):
        return summarize([s for p in parts for s in p.samples])
    weighted = [p.median_ms for p in parts for _ in range(max(1, p.trials))]
    return Timing(
        median(weighted),
        max((p.noise for p in parts), default=0.0),
        sum(p.trials for p in parts),
    )


class GpuTimer:
    """Times callables on one CUDA device (one per worker)."""

    def __init__(
        self, device: str, flush_bytes: int | None = None, gap_ms: float | None = TRIAL_GAP_MS
    ):
        self.device = device
        if flush_bytes is None:
            props = torch.cuda.get_device_properties(torch.device(device))
            flush_bytes = flush_bytes_for(getattr(props, "L2_cache_size", None))
        self.flush_bytes = int(flush_bytes)
        self.gap_ms = gap_ms
        self.device_index = torch.device(device).index
        self._flush_buf = TRUSTED.empty(self.flush_bytes, dtype=torch.int8, device=device)
        self._rates: dict[str, float] | None = None
        self.enqueue_ms = 0.0  # the host's time per trial in the last _measure
        self.flush_ms = self._flush_time()

    def _flush_time(self) -> float:
        start, end = TRUSTED.cuda_event(), TRUSTED.cuda_event()
        stream = self._stream()
        self._flush()
        self._sync()
        TRUSTED.event_record(start, stream)
        for _ in range(5):
            self._flush()
        TRUSTED.event_record(end, stream)
        self._sync()
        return float(TRUSTED.elapsed_time(start, end)) / 5

    def _stream(self) -> Any:
        """The device's current stream, as torch._C says (the candidate's calls run on
        it: one that left another stream current fails at anti-cheat)."""
        return TRUSTED.current_stream(self.device_index)

    def _flush(self) -> None:
        self._flush_buf.zero_()

    def _sync(self) -> None:
        TRUSTED.cuda_synchronize()  # device-wide: side-stream work is waited for too

    def _measure(
        self, fn: Callable[[], Any], trials: int, sleep_cycles: int = 0, lead_cycles: int = 0
    ) -> list[float]:
        """`trials` flushed trials of `fn`, each between two events: a GPU sleep of
        `sleep_cycles` before each trial's start event and one of `lead_cycles` before
        the first, so that the host has enqueued each launch before the GPU reaches it.
        The host's time per trial is kept in `enqueue_ms` (the plan reads it)."""
        event, record = TRUSTED.cuda_event, TRUSTED.event_record
        starts = [event() for _ in range(trials)]
        ends = [event() for _ in range(trials)]
        stream = self._stream()  # named once, as torch._C says before the trials
        flush, sleep = self._flush, _GPU_SLEEP if (sleep_cycles or lead_cycles) else None
        self._sync()
        t0 = TRUSTED.perf_counter()
        if sleep is not None and lead_cycles:
            sleep(lead_cycles)
        for i in range(trials):
            flush()
            if sleep is not None and sleep_cycles:
                sleep(sleep_cycles)
            record(starts[i], stream)
            fn()
            record(ends[i], stream)
        self.enqueue_ms = (TRUSTED.perf_counter() - t0) * 1e3 / max(1, trials)
        self._sync()
        return [float(TRUSTED.elapsed_time(s, e)) for s, e in zip(starts, ends, strict=True)]

    def trials(self, fn: Callable[[], Any], trials: int) -> list[float]:
        """A coarse look: one warm-up call, then `trials` flushed trials (a sweep's
        screen, where a config far behind the fastest is not timed in full)."""
        fn()
        return self._measure(fn, trials, PROBE_SLEEP_CYCLES)

    def time(self, fn: Callable[[], Any], target_ms: float = TARGET_MS) -> Timing:
        """Median of enough flushed trials to fill about `target_ms` (at least 10)."""
        return self.time_planned(fn, target_ms, {})

    def time_planned(self, fn: Callable[[], Any], target_ms: float, plan: dict) -> Timing:
        """time(), where `plan` keeps what one timing of `fn` learned for the next (the
        host's enqueue time, hence the GPU's sleeps, and a trial's length): back-to-back
        rounds time the same call again and again, and probing it each round cost them
        about a sixth of their GPU time. An empty plan is filled (plan_trials)."""
        fn()  # warm-up (compiles and autotunes happened in the correctness gate already)
        self._sync()
        if not plan:
            plan.update(self.plan_trials(fn))
        per_trial = plan["per_trial_ms"]
        trials = int(min(MAX_TRIALS, max(MIN_TRIALS, target_ms / per_trial)))
        samples = self._measure(fn, trials, plan["sleep_cycles"], plan.get("lead_cycles", 0))
        return summarize(samples)

    def plan_trials(self, fn: Callable[[], Any]) -> dict[str, Any]:
        """How `fn` is timed: how long the host takes to enqueue one call, the GPU sleep
        that hides it from an idle GPU (2x that, and 20 us), a probe of three trials so
        slept. How many trials a target holds (per_trial_ms) is counted as it always
        was: the probe, that sleep and a COUNTED_FLUSH_BYTES flush per trial, whatever
        the flush and the gap are now. The gap before each trial: that sleep, or with
        gap_ms a fixed one, lengthened where the trial's flush, gap and call would not
        outlast the host's enqueueing of a trial by LEAD_MARGIN, after one lead sleep."""
        host_ms = []
        for _ in range(3):  # how long the host takes to enqueue one call
            self._sync()
            t0 = TRUSTED.perf_counter()
            fn()
            host_ms.append((TRUSTED.perf_counter() - t0) * 1e3)
        self._sync()
        sleep_ms = 2.0 * median(host_ms) + 0.02
        probe = median(self._measure(fn, 3, _cycles(sleep_ms)))
        # the host's whole trial (flush, sleep and event launches, the call), as probed
        enqueue_ms = self.enqueue_ms or median(host_ms)
        flush_ms = float(self.flush_ms)
        counted_flush_ms = flush_ms * COUNTED_FLUSH_BYTES / self.flush_bytes
        plan = {
            "per_trial_ms": max(probe + counted_flush_ms + sleep_ms, 1e-3),
            "sleep_cycles": _cycles(sleep_ms),
            "lead_cycles": 0,
            "enqueue_ms": round(enqueue_ms, 4),
        }
        if self.gap_ms is not None:
            short_ms = LEAD_MARGIN * enqueue_ms - (flush_ms + probe)
            plan["sleep_cycles"] = _cycles(max(self.gap_ms, short_ms))
            plan["lead_cycles"] = _cycles(LEAD_TRIALS * sleep_ms)
        return plan

    # --- measured ceilings ------------------------------------------------------------
    def rates(self) -> dict[str, float]:
        """Copy bandwidth (bytes/ms) and matmul rates (ops/ms) of this GPU, once."""
        if self._rates is None:
            self._rates = _measure_rates(self)
        return dict(self._rates)

    def floor_ms(self, bytes_moved: float, flops: float, unit: str) -> float | None:
        rates = self.rates()
        parts = []
        if rates.get("copy") and bytes_moved > 0:
            parts.append(bytes_moved / rates["copy"])
        if rates.get(unit) and flops > 0:
            parts.append(flops / rates[unit])
        return max(parts) if parts else None


def _cycles(ms: float) -> int:
    """A GPU sleep of `ms` in SM cycles, at most MAX_SLEEP_CYCLES."""
    return int(min(MAX_SLEEP_CYCLES, max(0.0, ms) * SLEEP_CYCLES_PER_MS))


def time_with_plan(timer: Any, fn: Callable[[], Any], target_ms: float, plan: dict) -> Timing:
    """`fn` timed by `timer` with its plan (GpuTimer.time_planned: probed once for every
    timing of the same call); a timer without plans (a test's table of times) times it
    plainly."""
    planned = getattr(timer, "time_planned", None)
    return timer.time(fn, target_ms) if planned is None else planned(fn, target_ms, plan)


# A ceiling is the best rate the GPU showed: the fastest of RATE_REPEATS medians of the same
# work, the first taken cold. The floor is a time no kernel should beat, and a kernel timed
# in short flushed trials runs at the clocks of a first median: on an H100 (2026-12-06,
# bench/ceiling_rates.py) the bf16 matmul's first medians in a process read 795-800
# TFLOP/s and the ones after 680-740, as sustained matmuls brought the clocks down; one
# median alone (the way before) read anywhere from 740 to 800 between processes.
RATE_REPEATS = 3


def best_ms(timer: GpuTimer, fn: Callable[[], Any], target_ms: float = 50.0) -> float:
    """The shortest of RATE_REPEATS medians of `fn`, each about `target_ms` of trials."""
    return min(timer.time(fn, target_ms).median_ms for _ in range(RATE_REPEATS))


def _measure_rates(timer: GpuTimer) -> dict[str, float]:
    rates: dict[str, float] = {}
    dev = timer.device
    try:
        n = 512 * 1024 * 1024
        src = TRUSTED.empty(n, dtype=torch.int8, device=dev)
        dst = TRUSTED.empty(n, dtype=torch.int8, device=dev)
        src.fill_(1)
        rates["copy"] = 2 * n / best_ms(timer, lambda d=dst, s=src: d.copy_(s))  # read + write
        del src, dst
    except Exception:
        pass
    size = 8192
    flops = 2.0 * size**3
    for unit, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        try:
            a = torch.randn(size, size, device=dev).to(dtype)
            b = torch.randn(size, size, device=dev).to(dtype)
            rates[unit] = flops / best_ms(timer, lambda a=a, b=b: torch.mm(a, b))
            del a, b
        except Exception:
            pass
    try:
        a8 = torch.randint(-128, 127, (size, size), dtype=torch.int8, device=dev)
        b8 = torch.randint(-128, 127, (size, size), dtype=torch.int8, device=dev)
        rates["int8_int_mm"] = flops / best_ms(timer, lambda a=a8, b=b8: torch._int_mm(a, b.t()))
    except Exception:
        pass
    return with_int8_ceiling(rates)


def with_int8_ceiling(rates: dict[str, float]) -> dict[str, float]:
    """`rates` with "int8": the higher of torch._int_mm's measured rate and twice the
    measured bf16 rate. NVIDIA tensor cores since Ampere run dense int8 at twice bf16;
    torch._int_mm reaches only about half of that on an H200, so on its own it made a
    floor that good int8 kernels beat."""
    out = dict(rates)
    basis = [out.get("int8_int_mm"), 2.0 * out["bf16"] if out.get("bf16") else None]
    known = [r for r in basis if r]
    if known:
        out["int8"] = max(known)
    return out
