"""One candidate's verification: load it, enter the stages in order (compile ahead,
correctness, speed, each through the worker's `stage` callback when pipelined, its
seconds recorded), make each checked call, and give the verdict."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.ops.spec import OpSpec, Shape
from kernelladder.verifier.contract.verdict import (
    FAIL,
    GATES,
    PASS,
    SKIPPED,
    Feedback,
    GateResult,
    Verdict,
)
from kernelladder.verifier.worker import candidate as candidate_mod
from kernelladder.verifier.worker import fence, integrity, poison
from kernelladder.verifier.worker.anti_cheat import AntiCheatChecks
from kernelladder.verifier.worker.compile_ahead import CompileAhead
from kernelladder.verifier.worker.correctness import CorrectnessTrials
from kernelladder.verifier.worker.fingerprints import ReferenceFingerprints
from kernelladder.verifier.worker.gate_tools import (
    _Broken,
    _children,
    _Stop,
    device_healthy,
    listed,
    ops_text,
)
from kernelladder.verifier.worker.input_draws import held_copy, redrawable
from kernelladder.verifier.worker.integrity import TRUSTED
from kernelladder.verifier.worker.judgement_warmup import JudgementWarmup
from kernelladder.verifier.worker.measured import BASELINES_GPU, _spec_key
from kernelladder.verifier.worker.options import (
    DEFAULT_SEEDS,
    Outcome,
    ProgressFn,
    StageFn,
    VerifyOptions,
)
from kernelladder.verifier.worker.reference_tripwire import reference_tripwire
from kernelladder.verifier.worker.registration_log import REGISTRATIONS
from kernelladder.verifier.worker.speed_gate import SpeedGate
from kernelladder.verifier.worker.state_audit import StateAudit


@dataclass
class _Observations:
    anti_cheat: dict[str, str] = field(default_factory=dict)  # problem -> first evidence
    determinism: list[str] = field(default_factory=list)
    calls: int = 0
    launches: int = 0
    trials: int = 0


class CandidateRun(
    AntiCheatChecks,
    CompileAhead,
    CorrectnessTrials,
    JudgementWarmup,
    ReferenceFingerprints,
    SpeedGate,
    StateAudit,
):
    """One candidate's verification (state of the trials and the gate results)."""

    def __init__(
        self,
        verifier: Any,  # gates.Verifier: its measured times, scratch dir, walls, environment
        spec: OpSpec,
        opts: VerifyOptions,
        digest: str,
        report: ProgressFn,
        stage: StageFn | None = None,
    ):
        self.v = verifier
        self.spec = spec
        self.opts = opts
        self.digest = digest
        self.report = report
        self.stage = stage if opts.pipeline else None
        self.stages: dict[str, float] = {}  # seconds per stage (pipelined)
        self._stage_at: tuple[str, float] | None = None
        # seconds and counts of each stage's parts ("correctness.reference": [s, n])
        self.parts: dict[str, list[float]] = {}
        self.phase = "references"  # the stage a part is counted in
        self.early_stop: dict[str, Any] | None = None
        self._plans: dict[str, dict] = {}  # the GPU timer's plan per shape (speed_gate.py)
        self.device = opts.device
        self.cuda = opts.device.startswith("cuda")
        self.shapes = spec.shapes_for(opts.device, opts.suite)
        self.seeds = opts.seeds or DEFAULT_SEEDS["cuda" if self.cuda else "cpu"]
        # correctness also at shapes no proposer has seen, drawn afresh (seed recorded)
        count = opts.unseen_shapes
        if count is None:
            count = spec.unseen.count if spec.unseen is not None else 0
        self.unseen_count = count
        self.unseen_seed = opts.unseen_seed
        if self.unseen_seed is None:  # one drawn and fingerprinted ahead, else a fresh one
            pool = verifier.unseen_pool.get((_spec_key(spec), self.device, count))
            self.unseen_seed = pool.pop() if pool else int.from_bytes(os.urandom(4), "little")
        self.unseen = self._draw_unseen(self.unseen_seed)
        self.results: dict[str, GateResult] = {}
        self.feedback = Feedback(fence=spec.fence)
        self.obs = _Observations()
        self.recycle = False
        self.flags: list[str] = []
        self.speed: dict[str, Any] = {}
        self.extra = integrity.op_objects(spec)
        self.cand: candidate_mod.LoadedCandidate | None = None
        self.recorder: fence.FenceRecorder | None = None
        self.state: Any = None  # torch's state before the load (torch_state.StateSnapshot)
        self.unaudited = False  # candidate code ran since the last FULL audit of it
        self.since_end = False  # ... since the last END (or FULL) audit
        self.timed = False  # the speed gate timed it (its final audit goes in full)
        self.loaded_once = False
        self.own_namespaces: set[str] = set()  # operators' namespaces the candidate made
        self.unfingerprinted: set[str] = set()  # shapes judged without a fingerprint
        self.candidate_unchecked = False  # its code ran since the last CHEAP audit
        self.set_back: list[str] = []  # what the verifier's own code changed, set back
        self.checked_digests: dict[str, list[Any]] = {}  # shape -> the seed-0 call's outputs

    def _draw_unseen(self, seed: int) -> tuple[Shape, ...]:
        return self.spec.draw_unseen_shapes(
            random.Random(seed), self.unseen_count, "cuda" if self.cuda else "cpu"
        )

    # --- results ------------------------------------------------------------------------
    def _set(self, gate: str, status: str, detail: str, **evidence: Any) -> None:
        self.results[gate] = GateResult(status, detail, evidence)

    def _fail(self, gate: str, detail: str, expected: str, saw: str, **evidence: Any) -> None:
        self._set(gate, FAIL, detail, **evidence)
        if not self.feedback.saw:
            self.feedback = Feedback(expected=expected, saw=saw, fence=self.spec.fence)

    def _not_judged(self, why: str) -> None:
        """The gates between the load and anti-cheat not judged yet are not judged."""
        for gate in GATES[GATES.index("load") + 1 : GATES.index("anti-cheat")]:
            if gate not in self.results:
                self._set(gate, SKIPPED, f"not judged: {why}")

    def _fail_at_anti_cheat_alone(self, detail: str, expected: str, evidence: dict) -> None:
        """The candidate fails at anti-cheat, whatever the other gates said: their
        failures kept as evidence ("then"), the gates before anti-cheat not judged."""
        before = GATES[: GATES.index("anti-cheat")]
        then = {g: r.detail for g, r in self.results.items() if r.status == FAIL}
        if then:
            evidence["then"] = then
        for gate in list(self.results):
            if gate not in before or self.results[gate].status == FAIL:
                del self.results[gate]
        for gate in before:
            self.results.setdefault(gate, GateResult(SKIPPED, "not judged: " + detail))
        self.speed = {}
        self.early_stop = None
        self.feedback = Feedback(fence=self.spec.fence)
        self._fail("anti-cheat", detail, expected=expected, saw=detail, **evidence)

    @contextlib.contextmanager
    def _part(self, name: str, sync: bool = False) -> Iterator[None]:
        """Seconds spent in one part of the current stage (`sync`: the GPU's work it
        queued waited for, so that the part, not the next one, counts it)."""
        start = TRUSTED.perf_counter()
        try:
            yield
        finally:
            if sync and self.cuda:
                with contextlib.suppress(Exception):
                    TRUSTED.cuda_synchronize()
            entry = self.parts.setdefault(f"{self.phase}.{name}", [0.0, 0])
            entry[0] += TRUSTED.perf_counter() - start
            entry[1] += 1

    def _verdict(self, kind: str | None = None) -> Verdict:
        self._set_back_evidence()
        gates: dict[str, GateResult] = {}
        first_fail = next(
            (g for g in GATES if self.results.get(g, None) and self.results[g].status == FAIL), None
        )
        for gate in GATES:
            if gate in self.results:
                gates[gate] = self.results[gate]
            else:
                why = f"not run: {first_fail} failed" if first_fail else "not run"
                gates[gate] = GateResult(SKIPPED, why)
        fault = None
        for extra_gate in ("crash", "timeout"):
            if extra_gate in self.results:
                gates[extra_gate] = self.results[extra_gate]
                fault = extra_gate
        gate = fault or first_fail
        passed = gate is None
        return Verdict(
            verdict=PASS if passed else FAIL,
            kind=kind or (PASS if passed else (fault or FAIL)),
            gate=gate,
            gates=gates,
            op=self.spec.name,
            device="cuda" if self.cuda else "cpu",
            source_hash=self.digest,
            feedback=self.feedback,
            speedup=self.speed.get("speedup"),
            speedup_vs=dict(self.speed.get("speedup_vs") or {}),
            floor_fraction=self.speed.get("floor_fraction"),
            noise=self.speed.get("noise"),
            timings=tuple(self.speed.get("timings") or ()),
            flags=tuple(self.flags),
            environment=self._environment(),
            early_stop=self.early_stop if passed else None,
            stages=self._stage_seconds(),
            stage_parts={k: (round(v[0], 4), int(v[1])) for k, v in self.parts.items()},
        )

    # --- stages (a pipelined verification) ---------------------------------------------
    def _enter(self, name: str, gpu: str) -> None:
        """Enter a stage; wait until the client gives the GPU as `gpu` asks."""
        self.phase = name
        if self.stage is None:
            return
        self._close_stage()
        asked = TRUSTED.perf_counter()
        known = self.stage(name, gpu)
        now = TRUSTED.perf_counter()
        if isinstance(known, Mapping) and self.opts.pipeline:
            self.v.take_known(self.spec, known)  # a worker that joined as others measured
        if gpu != "none":
            self.stages["wait"] = self.stages.get("wait", 0.0) + (now - asked)
        self._stage_at = (name, now)

    def _close_stage(self) -> None:
        if self._stage_at is not None:
            name, since = self._stage_at
            self.stages[name] = self.stages.get(name, 0.0) + (TRUSTED.perf_counter() - since)
            self._stage_at = None

    def _stage_seconds(self) -> dict[str, float]:
        self._close_stage()
        return {k: round(v, 4) for k, v in self.stages.items()}

    def _correctness_access(self) -> str:
        """Correctness runs beside other workers' correctness, except for a candidate
        that autotunes: its benchmarks want the GPU to themselves."""
        return "exclusive" if "autotune" in self.opts.source else "shared"

    def _times_speed(self) -> bool:
        return self.cuda or self.v.timer_supplied

    def _environment(self) -> dict[str, Any]:
        """The worker's environment, with the copy and matmul rates once measured."""
        env = dict(self.v.environment)
        rates = getattr(self.v._timer, "_rates", None) if self.v._timer is not None else None
        if rates:
            env["rates"] = dict(rates)
        return env

    # --- the run ------------------------------------------------------------------------
    def _baselines_to_prepare(self) -> bool:
        return bool(
            self.stage is not None
            and self.cuda
            and self.opts.baselines
            and self.v.baselines_unprepared(self.spec, self.shapes)
        )

    def _prepare_baselines(self) -> None:
        """Pipelined on a GPU: torch.compile's baselines compiled at every shape before
        the candidate is loaded, once per worker, so its timing turns only time; the GPU
        asked for as measured.BASELINES_GPU says (alone; the caller grants it shared once
        another worker of the GPU compiled them alone: stage_grants.StageGrants.grant)."""
        if not self._baselines_to_prepare():
            return
        self.report("baselines", "compiling torch.compile's baselines")
        self._enter("baselines", BASELINES_GPU)
        try:
            self.v.prepare_baselines(self.spec, self.shapes, self.seeds[0])
        except Exception:  # the speed gate compiles what is left, and says what fails
            pass

    def execute(self) -> Outcome:
        try:
            return self._final_state_audit(self._execute())
        finally:  # an unseen shape's fingerprint serves its verification only
            for shape in self.unseen:
                self.v.fingerprints.pop(self._fingerprint_key(shape, self.seeds[0]), None)

    def _execute(self) -> Outcome:
        self._own_work_before_load()
        if self.v.fault:
            return self._fault_before_load()
        REGISTRATIONS.take()
        self.phase = "load"
        with self._part("integrity.take"):
            self.before = integrity.take(self.extra)
        self.threads_before = set(threading.enumerate())
        self.children_before = _children()
        self.report("load", "loading the candidate")
        self.unaudited = self.since_end = self.loaded_once = True
        self.candidate_unchecked = True
        self.v.candidates_loaded += 1
        try:
            with self._part("load"):
                self.cand = candidate_mod.load(
                    self.opts.source, self.spec, self.v.scratch_dir, self.device, self.digest
                )
        except candidate_mod.LoadFailure as exc:
            self._fail(
                "load",
                exc.detail,
                expected=f"a module defining {self._entry_text()}",
                saw=exc.detail,
                traceback=exc.trace,
            )
            self._check_integrity("loading")  # a candidate may patch, then fail to import
            return Outcome(self._verdict(), self.recycle)
        try:
            self._set("load", PASS, f"{self._entry_text()} found", module=self.cand.module_name)
            if not self._check_integrity("loading") or not self._check_state("loading"):
                return Outcome(self._verdict(), True)
            self.recorder = fence.FenceRecorder(
                frozenset(self.spec.forbidden_aten),
                builtin=self.spec.kind != "kernelbench",
                known_namespaces=self.state.namespaces,
            )
            try:
                if self.stage is not None:
                    self._enter("compile", "none")
                    self._compile_ahead()
                    self._enter("correctness", self._correctness_access())
                self.phase = "correctness"
                self._trials()
                self._judge_after_trials()
                if self._all_passed():
                    if self._times_speed():
                        self._enter("speed", "exclusive")
                    self._speed_gate()
            except _Stop:
                self._fence_so_far()
            except _Broken as exc:
                self._set("crash", FAIL, f"the GPU context broke: {exc}", error=str(exc))
                expected = "the candidate's kernels run without a device fault"
                return self._crashed(expected, f"device fault: {exc}")
            except Exception as exc:  # a verifier error provoked by odd outputs, or a bug
                if self.cuda and not device_healthy():
                    self._set("crash", FAIL, f"the GPU context broke: {exc!r:.300}")
                    return self._crashed()
                line, trace = candidate_mod.describe_exception(exc, self.cand.path, limit=20)
                self._set("crash", FAIL, f"verifier error while judging: {line}", traceback=trace)
                return self._crashed("outputs the verifier can judge", line)
            return Outcome(self._verdict(), self.recycle)
        finally:
            candidate_mod.unload(self.cand.module_name)

    def _crashed(self, expected: str | None = None, saw: str = "") -> Outcome:
        """A crash verdict, the worker replaced (and the feedback, where `expected` is given)."""
        self.recycle = True
        if expected is not None:
            self.feedback = Feedback(expected=expected, saw=saw, fence=self.spec.fence)
        return Outcome(self._verdict(kind="crash"), True)

    def _own_work_before_load(self) -> None:
        """The verifier's own work before any candidate code (torch.compile's compiles,
        the judgement's first run, the reference's fingerprints), with torch's state
        proven before it and taken again after it (gates.Verifier.own_work): whatever the
        judgement changes by running is in the state the audits compare against. A
        problem's or workspace's own modules load as the op does, with what they
        register: for them the state is taken again every time (a built-in op adds
        nothing)."""
        builtin = self.spec.kind == "builtin"
        compiles = self._baselines_to_prepare()
        warm = self._needs_warmup()
        missing = self._missing_fingerprints(self._trials_to_expect() + self._unseen_ahead())
        own = self.v.own_work_s
        before = dict(own)
        if compiles or warm or missing or not builtin or self.v._state is None:
            with self.v.own_work(full=compiles or warm or not builtin, prove=builtin):
                self._prepare_baselines()
                self._prepare_judgement(warm, missing)
        for what, seconds in own.items():
            if seconds != before.get(what):
                entry = self.parts.setdefault(f"{self.phase}.state.{what}", [0.0, 0])
                entry[0] += seconds - before.get(what, 0.0)
                entry[1] += 1
        self.state = self.v.state_snapshot()
        self.set_back += self.v.take_set_back()

    def _fault_before_load(self) -> Outcome:
        """Torch's state changed since this worker's last verdict in a way that cannot be
        set back: not this candidate's doing (it has not loaded); the worker goes."""
        problems = self.v.fault
        self._state_crash(
            "torch's state changed since this worker's last verification, before the "
            f"candidate loaded: {listed(problems)}; the worker is replaced",
            problems,
        )
        return Outcome(self._verdict(kind="crash"), True)

    def after_walls(self, outcome: Outcome, hits: list[str], changed: list[str]) -> Outcome:
        """The verdict again when the candidate hit the sandbox's walls or changed the
        verifier's files: it fails at anti-cheat, naming the wall or the files, whatever
        the other gates said (a denied write often surfaces as a bare PermissionError)."""
        if not hits and not changed:
            return outcome
        if changed:
            detail = f"the candidate changed the verifier's files: {listed(changed, 4, ', ')}"
            flag, evidence = "verifier-files-changed", {"files": changed}
        else:
            detail = f"sandbox: {listed(hits, 1)}"
            flag, evidence = "sandbox-wall", {"walls": hits}
        if changed and hits:
            evidence["walls"] = hits
        self._fail_at_anti_cheat_alone(
            detail,
            "a candidate that stays inside the sandbox's walls and leaves the verifier's files alone",
            evidence,
        )
        self.flags.append(flag)
        return Outcome(self._verdict(), outcome.recycle or bool(changed), outcome.retire)

    def _fence_so_far(self) -> None:
        """After an early stop, the fence as judged on the calls that returned."""
        if "fence" in self.results or self.obs.launches == 0 or self.recorder is None:
            return
        self._set(
            "fence",
            PASS,
            f"{self.obs.launches} Triton launches over the calls made before the stop; "
            f"torch ops: {ops_text(self.recorder.calls)}",
            launches=self.obs.launches,
            torch_ops=dict(self.recorder.calls),
        )

    def _entry_text(self) -> str:
        if self.spec.kind == "kernelbench" or getattr(self.spec, "entry", "") == "ModelNew":
            return "class ModelNew (KernelBench format)"
        return self.spec.signature.split("->")[0].strip()

    def _all_passed(self) -> bool:
        return all(r.status != FAIL for r in self.results.values())

    def _check_integrity(self, when: str) -> bool:
        with self._part("integrity"):
            problems = integrity.altered(self.before, self.extra)
        if not fence.launch_wrappers_intact():
            problems.append("Triton's launch entry point was replaced")
        if not problems:
            return True
        self.recycle = True
        detail = f"the candidate altered the verifier while {when}: {listed(problems, 3, ', ')}"
        self._not_judged("the candidate altered the verifier")
        self._fail(
            "anti-cheat",
            detail,
            expected="the verifier's timers, synchronization and comparisons stay untouched",
            saw=detail,
            altered=problems[:8],
        )
        return False

    # --- one checked call -----------------------------------------------------------------
    def _checked_call(
        self, inputs: dict[str, torch.Tensor], shape: Shape, seed: int, trial: str
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        assert self.cand is not None and self.recorder is not None
        spec, state, rec = self.spec, fence.STATE, self.recorder
        args = [inputs[name] for name in spec.arg_names]
        held = self._held_copy(inputs, shape)
        expected = spec.expected_outputs(shape)
        spacers = poison.poison_before_call(expected, self.device)
        stream = fence._current_stream_handle() if self.cuda else None
        state.expected_stream = stream
        launches0, side0, other0 = (
            state.launches,
            state.side_stream_launches,
            state.other_thread_launches,
        )
        rec.violations.clear()
        where = f"shape '{shape.label}', seed {seed}" + (f" ({trial})" if trial else "")
        self.obs.calls += 1
        self._candidate_runs("a call")
        self.since_end = True
        active = True
        try:
            state.watch_streams = self.cuda
            with self._part("call"), reference_tripwire(self.spec) as reference_calls, rec:
                result = self.cand.call(*args)
                active = rec.is_active()
        except BaseException as exc:
            state.watch_streams = False
            if self.cuda and not device_healthy():
                raise _Broken(f"{type(exc).__name__}: {str(exc)[:200]}") from None
            if self._check_integrity("being called"):
                self._check_state("being called")
            if "anti-cheat" in self.results:
                raise _Stop from None
            line, trace = candidate_mod.describe_exception(exc, self.cand.path)
            if rec.violations:
                self._fence_fail(where)
            self._fail(
                "correctness",
                f"the candidate raised on {where}: {line}",
                expected=f"kernel returns {self._outputs_text(shape)}",
                saw=f"{line} on {where}",
                traceback=trace,
            )
            raise _Stop from None
        finally:
            state.watch_streams = False
            del spacers
        self._stop_at_a_wall()
        launches = state.launches - launches0
        self.obs.launches += launches
        if self.cuda and not device_healthy():
            raise _Broken("a CUDA error surfaced after the call returned")
        if not self._check_integrity("being called"):
            raise _Stop
        self._check_state_or_stop("being called")
        if not active:
            self._fence_fail(where, extra="the candidate removed the verifier's torch op recorder")
        if reference_calls and self.spec.kind == "workspace":
            rec.violations[f"{reference_calls[0]} (the reference)"] += len(reference_calls)
        elif reference_calls:
            rec.violations["the problem's Model.forward (the reference)"] += len(reference_calls)
        if rec.violations:
            self._fence_fail(where)
        if launches == 0:
            self._fail(
                "fence",
                f"no Triton kernel was launched on {where}",
                expected="at least one Triton kernel launch per call",
                saw=f"0 Triton launches on {where}; torch ops called: {ops_text(rec.calls)}",
                launches=0,
                torch_ops=dict(rec.calls),
            )
            raise _Stop
        outs = self._outputs(result, shape, where)
        with self._part("side"):
            self._side_work(outs, state, side0, other0, stream, where)
        drawn = self._inputs_as_drawn(held, shape, seed)
        with self._part("side"):
            self._anti_cheat_after_call(outs, inputs, drawn, where)
        return outs, drawn

    # --- what a call is checked against (input_draws.py) -------------------------------
    def _redrawable(self, shape: Shape) -> bool:
        return redrawable(self.spec, shape, self.seeds[0], self.device, self.v.redrawable)

    def _held_copy(self, inputs: Mapping[str, Any], shape: Shape) -> dict[str, Any] | None:
        """None when the inputs can be drawn again after the call; else a copy of them,
        taken now."""
        return None if self._redrawable(shape) else held_copy(inputs)

    def _inputs_as_drawn(self, held: dict[str, Any] | None, shape: Shape, seed: int) -> dict:
        """The inputs as the verifier drew them for this call (drawn again now), or the
        copy held through it."""
        if held is not None:
            return held
        with self._part("inputs", sync=True):
            return self.spec.make_inputs(shape, seed, self.device)

    def _stop_at_a_wall(self) -> None:
        """A candidate that hit a wall is judged by that alone (after_walls): stop now."""
        if self.v.walls is not None and self.v.walls.hits:
            raise _Stop

    def _fence_fail(self, where: str, extra: str = "") -> None:
        rec = self.recorder
        assert rec is not None
        offending = sorted(rec.violations)
        detail = extra or f"torch ops outside the fence on {where}: {', '.join(offending[:6])}"
        self._fail(
            "fence",
            detail,
            expected="compute in Triton only; torch may allocate and make views",
            saw=detail,
            offending_ops=offending,
            torch_ops=dict(rec.calls),
        )
        raise _Stop

    def _outputs_text(self, shape: Shape) -> str:
        parts = [
            f"{name} {list(s)} {str(d).replace('torch.', '')}"
            for name, (s, d) in zip(
                self.spec.output_names, self.spec.expected_outputs(shape), strict=False
            )
        ]
        return ", ".join(parts)
