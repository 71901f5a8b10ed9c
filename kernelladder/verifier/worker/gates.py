"""The gates, in order: load, fence, correctness, anti-cheat, determinism, speed.

One `Verifier` lives in each worker process and judges one candidate at a time. The
candidate is called only through `CandidateRun._checked_call` (recorded, poisoned,
inspected) or, in the speed gate, bare between CUDA events. Every call is followed by the
integrity check; anything that alters the verifier stops the run and recycles the worker.

Trials per shape of the suite: seed s0 (then two more calls on the same inputs for
determinism), the other seeds with fresh inputs, and one trial that writes new values
into the seed-s0 input tensors (same pointers) and calls again, so results cached by
pointer fail.
"""

from __future__ import annotations

import contextlib
import platform
import sys
from collections.abc import Iterator
from typing import Any

import torch

from kernelladder.verifier.contract import source_files
from kernelladder.verifier.contract.verdict import (
    FAIL,
    GATES,
    SKIPPED,
    Feedback,
    GateResult,
    Verdict,
    source_hash,
)
from kernelladder.verifier.worker import fence, state_set_back, torch_state
from kernelladder.verifier.worker.candidate_run import CandidateRun
from kernelladder.verifier.worker.integrity import TRUSTED
from kernelladder.verifier.worker.measured import (
    CACHE_REFRESH_S,
    CACHE_REFRESH_USES,
    MeasuredTimes,
    _spec_key,
    prime_compiler,
    set_compile_limits,
)
from kernelladder.verifier.worker.options import (
    DEFAULT_SEEDS,
    Outcome,
    ProgressFn,
    StageFn,
    VerifyOptions,
)
from kernelladder.verifier.worker.registration_log import REGISTRATIONS
from kernelladder.verifier.worker.speed_gate import PAIRED_ROUNDS
from kernelladder.verifier.worker.torch_state import CHEAP, FULL

# what callers import from here
__all__ = [
    "CACHE_REFRESH_S",
    "CACHE_REFRESH_USES",
    "DEFAULT_SEEDS",
    "PAIRED_ROUNDS",
    "Outcome",
    "ProgressFn",
    "StageFn",
    "Verifier",
    "VerifyOptions",
    "_spec_key",
    "environment_info",
    "source_hash",
]


class Verifier(MeasuredTimes):
    """Judges candidates in this process (the worker's one instance); what it measured
    is kept between them (MeasuredTimes)."""

    def __init__(
        self,
        device: str,
        scratch_dir: str,
        environment: dict[str, Any] | None = None,
        timer: Any = None,
    ):
        self.device = device
        self.scratch_dir = scratch_dir
        self.environment = dict(environment or {})
        super().__init__(timer)
        # The first op under a dispatch mode imports torch._dynamo, which rebinds
        # torch.manual_seed & co.: do both now, before any integrity snapshot.
        import torch._dynamo  # noqa: F401

        with fence.FenceRecorder(frozenset(), builtin=True):
            TRUSTED.empty(1)
        set_compile_limits()  # the baselines' compile limits, before torch's state is taken
        if device.startswith("cuda") or timer is not None:  # a worker that times baselines
            prime_compiler()
        self.walls: Any = None  # sandbox.WallLog: a candidate's attempts on the walls
        self.files: dict[str, str] | None = None  # the verifier's files' hashes at start
        # (op, shape label) -> whether two draws of its inputs came out the same
        # (CandidateRun._redrawable: KernelBench problems and workspaces draw their own)
        self.redrawable: dict[tuple[str, str], bool] = {}
        # the reference's outputs per trial, fingerprinted before a candidate loaded
        # (fingerprints.py), and the seeds of unseen shapes fingerprinted ahead per op
        self.fingerprints: dict[tuple[Any, ...], Any] = {}
        self.unseen_pool: dict[tuple[Any, ...], list[int]] = {}
        # torch's global state before any candidate (torch_state.py): taken before the
        # first, kept while each candidate leaves it as it found it (else the worker is
        # replaced), taken again after the verifier's own work before a candidate loads
        self._state: torch_state.StateSnapshot | None = None
        self._own_depth = 0  # own_work blocks open (the outermost proves and takes)
        self.candidates_loaded = 0  # in this process, all told
        self.warmed: set[tuple[Any, ...]] = set()  # judgement_warmup.py: ops run once
        self.fault: list[str] = []  # changes before a load that could not be set back
        self._set_back: list[str] = []  # ... that were set back (for the next verdict)
        self.own_work_s: dict[str, float] = {}  # the proofs' and takes' seconds, all told

    def state_snapshot(self) -> torch_state.StateSnapshot:
        """Torch's state as no candidate left it (taken now when there is none yet)."""
        if self._state is None:
            self._state = torch_state.take(full=True)
        return self._state

    def refresh_state(self) -> torch_state.StateSnapshot:
        """Taken again: after the verifier's own baseline work (torch.compile imports and
        registers as it first compiles), once an audit proved the candidate changed
        nothing."""
        self._state = torch_state.take(full=True)
        return self._state

    @contextlib.contextmanager
    def own_work(self, full: bool, prove: bool = True) -> Iterator[None]:
        """The verifier's own work before a candidate loads (torch.compile's compiles,
        the judgement's first run, the reference's fingerprints): torch's state is first
        proven as the last audit left it (in full where a full take follows and a
        candidate ran here before: what changed since is set back where it can be, else
        the next verification ends as the verifier's fault, `fault`), then taken again
        after it (in full where `full`: compiles define and register as they first run;
        else what a CHEAP audit reads). Nested blocks are the outer one's."""
        if self._own_depth:
            self._own_depth += 1
            try:
                yield
            finally:
                self._own_depth -= 1
            return
        self._own_depth = 1
        if prove and self._state is not None and not self.fault:
            self._timed("prove", self._prove, FULL if full and self.candidates_loaded else CHEAP)
        try:
            yield
        finally:
            self._own_depth = 0
            if not self.fault:
                if full or self._state is None:
                    self._timed("take", self.refresh_state)
                else:
                    self._state = self._timed("take", state_set_back.retake, self._state)

    def _timed(self, what: str, fn: Any, *args: Any) -> Any:
        start = TRUSTED.perf_counter()
        try:
            return fn(*args)
        finally:
            self.own_work_s[what] = self.own_work_s.get(what, 0.0) + TRUSTED.perf_counter() - start

    def _prove(self, level: str) -> None:
        """Torch's state as the last audit left it, before the verifier's own work: what
        changed since (code a candidate left behind) is set back where it can be; what
        cannot be is `fault`."""
        assert self._state is not None
        settled = state_set_back.settle(self._state, level, full_if_bypassed=True)
        if settled is None:
            return
        lines, self.fault = settled
        self._set_back += [f"{line}, before the candidate loaded" for line in lines]

    def take_set_back(self) -> list[str]:
        """What a proof set back since the last verdict (for the next one to name)."""
        lines, self._set_back = self._set_back, []
        return lines

    def prepare_baselines(self, spec: Any, shapes: Any, seed: int) -> float:
        with self.own_work(full=True):  # torch.compile's first compiles: the state taken again
            return super().prepare_baselines(spec, shapes, seed)

    @contextlib.contextmanager
    def library_work(self) -> Iterator[None]:
        """The baselines (torch.compile's inductor and its compile workers) are the
        verifier's own work: what they touch is no wall the candidate hit."""
        armed = self.walls is not None and self.walls.armed
        registering = REGISTRATIONS.armed
        if armed:
            self.walls.armed = False
        REGISTRATIONS.armed = False
        try:
            yield
        finally:
            REGISTRATIONS.armed = registering
            if armed:
                self.walls.armed = True

    def watch(self, walls: Any, files: dict[str, str] | None) -> None:
        """Name the walls a candidate hits, and check the verifier's files after each."""
        self.walls = walls
        self.files = dict(files) if files is not None else None

    def verify(
        self, opts: VerifyOptions, progress: ProgressFn | None = None, stage: StageFn | None = None
    ) -> Outcome:
        """The verdict on one candidate. `stage(name, gpu)` is called as a pipelined
        verification enters each stage and returns once the GPU is this one's as asked
        ("none", "shared" or "exclusive"); None: a serial verification."""
        start = TRUSTED.perf_counter()
        digest = source_hash(opts.source)
        report = progress or (lambda gate, message: None)
        try:
            from kernelladder.ops.registry import op_from_wire

            spec = op_from_wire(opts.op)
        except Exception as exc:
            detail = f"cannot load the op: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            gates = {"load": GateResult(FAIL, detail)}
            gates.update({g: GateResult(SKIPPED, "not run: load failed") for g in GATES[1:]})
            verdict = Verdict(
                verdict=FAIL,
                kind=FAIL,
                gate="load",
                gates=gates,
                op=str(opts.op if isinstance(opts.op, str) else (opts.op or {}).get("name", "?")),
                device=opts.device,
                source_hash=digest,
                feedback=Feedback(expected="a known op", saw=detail),
                elapsed_s=TRUSTED.perf_counter() - start,
                environment=dict(self.environment),
            )
            return Outcome(verdict)
        if opts.known and opts.pipeline:
            self.take_known(spec, opts.known)
        elif opts.known:  # the GPU's rates only: everything else this worker times itself
            self.take_known(spec, {"rates": opts.known.get("rates")})
        run = CandidateRun(self, spec, opts, digest, report, stage)
        if self.walls is not None:
            self.walls.take()
            self.walls.armed = True
        REGISTRATIONS.armed = True
        try:
            outcome = run.execute()
        finally:
            REGISTRATIONS.armed = False
            if self.walls is not None:
                self.walls.armed = False
        outcome = run.after_walls(
            outcome,
            self.walls.take() if self.walls is not None else [],
            source_files.changed(self.files) if self.files is not None else [],
        )
        elapsed = TRUSTED.perf_counter() - start
        from dataclasses import replace

        return Outcome(replace(outcome.verdict, elapsed_s=elapsed), outcome.recycle, outcome.retire)


def environment_info(device: str) -> dict[str, Any]:
    """Versions and the device, for the hello line and every verdict."""
    import triton

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?"),
        "device": device,
        "platform": sys.platform,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpus"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["cc"] = f"{props.major}.{props.minor}"
        info["sms"] = int(props.multi_processor_count)
    return info
