"""The gates, in order: load, fence, correctness, anti-cheat, determinism, speed.

One `Verifier` lives in each worker process and judges one candidate at a time. The
candidate is called only through `_Run._checked_call` (recorded, poisoned, inspected)
or, in the speed gate, bare between CUDA events. Every call is followed by the integrity
check; anything that alters the verifier stops the run and recycles the worker.

Trials per shape of the suite: seed s0 (then two more calls on the same inputs for
determinism), the other seeds with fresh inputs, and one trial that writes new values
into the seed-s0 input tensors (same pointers) and calls again, so results cached by
pointer fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import platform
import random
import statistics
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.ops.spec import BaselineNotApplicable, Mismatch, OpSpec, Shape
from kernelladder.verifier import candidate as candidate_mod
from kernelladder.verifier import fence, integrity, poison, source_files
from kernelladder.verifier.integrity import TRUSTED

try:  # torch.compile's compile-worker pool and its idle timer (see _compile_pool_timer)
    from torch._inductor.compile_worker.subproc_pool import SubprocPool as _POOL_CLS
    from torch._inductor.compile_worker.timer import Timer as _TIMER_CLS

    _TIMER_CHECK = _TIMER_CLS.check
except Exception:  # another torch layout: no exemption
    _POOL_CLS = _TIMER_CLS = _TIMER_CHECK = None
from kernelladder.verifier.verdict import (
    FAIL,
    GATES,
    PASS,
    SKIPPED,
    Feedback,
    GateResult,
    ShapeTiming,
    Verdict,
    fastest_baseline,
)

# Back-to-back rounds with the fastest baseline when the two are this close (relative):
# at a hardware limit they differ by less than the drift between separate timings.
PAIRED_BAND = 0.05
PAIRED_BAND_MAX = 0.25
PAIRED_ROUNDS = 7
PAIRED_TARGET_MS = 10.0  # of trials per timing in a round
SUSPICIOUS_SPEEDUP = 10.0  # over the best library baseline: implausible for these ops
FLAG_SUSPICIOUS = "speedup-over-10x-best-library"
DEFAULT_SEEDS = {"cuda": (0, 1, 2), "cpu": (0, 1)}
DETERMINISM_REPEATS = 2  # extra calls on the first seed's inputs
SAME_POINTER_SEED_OFFSET = 1000
UNSEEN_TRIAL = "unseen shape"

ProgressFn = Callable[[str, str], None]


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
    unseen_shapes: int | None = None  # how many (None: the op's count; 0: none)
    unseen_seed: int | None = None  # None: a fresh one, recorded in the verdict

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
            unseen_shapes=int(unseen) if unseen is not None else None,
            unseen_seed=int(unseen_seed) if unseen_seed is not None else None,
        )


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    recycle: bool = False


class _Stop(Exception):
    """Ends the trials early; the gate results so far say why."""


class _Broken(Exception):
    """The CUDA context is unusable (illegal memory access...): a crash verdict."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (NaN-safe bitwise comparisons)."""
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(TRUSTED.equal(_bits(a), _bits(b)))


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < a[1] and b[0] < b[1] and a[0] < b[1] and b[0] < a[1]


def _compile_pool_timer(thread: threading.Thread) -> bool:
    """Whether `thread` is the idle timer of torch.compile's own compile-worker pool.

    Inductor starts it (named "subproc_worker_timer") whenever its pool gets work, e.g.
    for the torch.compile baseline, and it can appear while a later candidate runs: an
    H200 check flagged an honest rmsnorm candidate for it. Only that timer is exempt: its
    target must be the original Timer.check (bound at import, before any candidate) of a
    Timer whose expiry calls a SubprocPool's own method. A thread merely named like it, or
    such a Timer that calls anything else, still counts; a pool the candidate started
    itself shows up as child processes.
    """
    if _TIMER_CHECK is None:
        return False
    target = getattr(thread, "_target", None)
    timer = getattr(target, "__self__", None)
    if type(timer) is not _TIMER_CLS or getattr(target, "__func__", None) is not _TIMER_CHECK:
        return False
    owner = getattr(getattr(timer, "call", None), "__self__", None)
    return type(owner) is _POOL_CLS


def _children() -> set[int]:
    pids: set[int] = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids.update(int(p) for p in fh.read().split())
    except OSError:
        pass
    return pids


def _fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else (f"{ms:.4f} ms" if ms < 1 else f"{ms:.3f} ms")


def _geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _index_str(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


class Verifier:
    """Judges candidates in this process (the worker's one instance)."""

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
        # A timer supplied by the caller (tests on a machine without a GPU) makes the
        # speed gate run; otherwise it runs only on CUDA with the GpuTimer.
        self._timer: Any = timer
        self.timer_supplied = timer is not None
        # The first op under a dispatch mode imports torch._dynamo, which rebinds
        # torch.manual_seed & co.: do both now, before any integrity snapshot.
        import torch._dynamo  # noqa: F401

        with fence.FenceRecorder(frozenset(), builtin=True):
            TRUSTED.empty(1)
        self._baseline_ms: dict[tuple[str, str, str], float | str] = {}
        self._compiled: dict[tuple[str, str], Any] = {}
        self.walls: Any = None  # sandbox.WallLog: a candidate's attempts on the walls
        self.files: dict[str, str] | None = None  # the verifier's files' hashes at start

    @contextlib.contextmanager
    def library_work(self) -> Iterator[None]:
        """The baselines (torch.compile's inductor and its compile workers) are the
        verifier's own work: what they touch is no wall the candidate hit."""
        armed = self.walls is not None and self.walls.armed
        if armed:
            self.walls.armed = False
        try:
            yield
        finally:
            if armed:
                self.walls.armed = True

    def watch(self, walls: Any, files: dict[str, str] | None) -> None:
        """Name the walls a candidate hits, and check the verifier's files after each."""
        self.walls = walls
        self.files = dict(files) if files is not None else None

    # --- GPU helpers (lazy: the CPU worker never touches CUDA) -------------------------
    def timer(self) -> Any:
        if self._timer is None:
            from kernelladder.verifier.timing import GpuTimer

            self._timer = GpuTimer(self.device)
        return self._timer

    def verify(self, opts: VerifyOptions, progress: ProgressFn | None = None) -> Outcome:
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
        run = _Run(self, spec, opts, digest, report)
        if self.walls is not None:
            self.walls.take()
            self.walls.armed = True
        try:
            outcome = run.execute()
        finally:
            if self.walls is not None:
                self.walls.armed = False
        outcome = run.after_walls(
            outcome,
            self.walls.take() if self.walls is not None else [],
            source_files.changed(self.files) if self.files is not None else [],
        )
        elapsed = TRUSTED.perf_counter() - start
        from dataclasses import replace

        return Outcome(replace(outcome.verdict, elapsed_s=elapsed), outcome.recycle)

    # --- baselines, cached per worker ---------------------------------------------------
    def baseline_ms(
        self, spec: OpSpec, shape: Shape, inputs: Mapping[str, torch.Tensor]
    ) -> dict[str, float | str]:
        """Median ms (or a reason it was skipped) of each library baseline at this shape."""
        spec_key = _spec_key(spec)
        out: dict[str, float | str] = {}
        for name, fn in self.baseline_fns(spec, shape, inputs).items():
            key = (spec_key, shape.label, name)
            if key not in self._baseline_ms:
                try:
                    self._baseline_ms[key] = self.timer().time(fn).median_ms
                except BaselineNotApplicable as exc:
                    self._baseline_ms[key] = f"not applicable: {exc}"
                except Exception as exc:
                    self._baseline_ms[key] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            out[name] = self._baseline_ms[key]
        return out

    def baseline_fns(
        self, spec: OpSpec, shape: Shape, inputs: Mapping[str, torch.Tensor]
    ) -> dict[str, Callable[[], Any]]:
        """Each library baseline, and torch.compile of the reference, as a call on `inputs`."""
        fns: dict[str, Callable[[], Any]] = {}
        for name, fn in spec.library_baselines().items():
            fns[name] = lambda fn=fn: fn(inputs)
        if spec.compiled_baseline:
            fns["torch.compile"] = self._compiled_reference(spec, shape, inputs)
        return fns

    def _compiled_reference(
        self, spec: OpSpec, shape: Shape, inputs: Mapping[str, torch.Tensor]
    ) -> Callable[[], Any]:
        key = (_spec_key(spec), shape.label)
        if key not in self._compiled:
            import torch._dynamo

            for knob in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 1024)
            for knob in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 8192)
            self._compiled[key] = torch.compile(spec.reference, dynamic=False)
        compiled = self._compiled[key]
        return lambda: compiled(dict(inputs))


@contextlib.contextmanager
def _workspace_tripwire(spec: OpSpec, hits: list[str]) -> Iterator[None]:
    """A workspace's reference (reference.py, or the user's original kernel when there
    is none) called during the candidate's call is a fence violation."""
    patched: list[tuple[Any, str, Any]] = []
    for module in spec.reference_modules():  # type: ignore[attr-defined]
        for attr in ("reference", "kernel"):
            original = module.__dict__.get(attr)
            if callable(original) and not isinstance(original, type):

                def tripped(*args: Any, _o: Any = original, _n: str = attr, **kw: Any) -> Any:
                    hits.append(f"the reference's {_n}(...)")
                    return _o(*args, **kw)

                patched.append((module, attr, original))
                setattr(module, attr, tripped)
        for cls_name in ("Model", "ModelNew"):
            cls = module.__dict__.get(cls_name)
            forward = vars(cls).get("forward") if isinstance(cls, type) else None
            if forward is not None:

                def tripped_forward(
                    *args: Any, _o: Any = forward, _n: str = cls_name, **kw: Any
                ) -> Any:
                    hits.append(f"the reference's {_n}.forward")
                    return _o(*args, **kw)

                patched.append((cls, "forward", forward))
                cls.forward = tripped_forward
    try:
        yield
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)


def close_rival(cand: Any, baselines: Mapping[str, float | str]) -> str | None:
    """The fastest baseline when it is within PAIRED_BAND (or twice the candidate's noise,
    up to PAIRED_BAND_MAX) of the candidate's time, else None: a wider margin needs no
    back-to-back rounds to be believed."""
    fastest = fastest_baseline(baselines)
    if fastest is None or not cand.median_ms or cand.median_ms <= 0:
        return None
    name, ms = fastest
    band = min(PAIRED_BAND_MAX, max(PAIRED_BAND, 2.0 * (cand.noise or 0.0)))
    return name if abs(ms / cand.median_ms - 1.0) <= band else None


def paired_result(rival: str, cand_ms: Sequence[float], rival_ms: Sequence[float]) -> dict:
    """Rounds won and lost, the median per-round ratio (rival / candidate), and the word:
    "faster" or "slower" only when every round went that way (a one-sided sign test,
    p = 2**-rounds: 0.008 at 7 rounds), else "tie"."""
    pairs = list(zip(cand_ms, rival_ms, strict=True))
    won = sum(1 for k, b in pairs if k < b)
    lost = sum(1 for k, b in pairs if k > b)
    rounds = len(pairs)
    word = "faster" if won == rounds else "slower" if lost == rounds else "tie"
    ratios = [b / k for k, b in pairs if k > 0]
    return {
        "baseline": rival,
        "rounds": rounds,
        "won": won,
        "lost": lost,
        "ratio": statistics.median(ratios) if ratios else math.nan,
        "candidate_ms": statistics.median(cand_ms),
        "baseline_ms": statistics.median(rival_ms),
        "verdict": word,
    }


def _spec_key(spec: OpSpec) -> str:
    return spec.name + ":" + source_hash(str(getattr(spec, "source", "")))[:12]


@dataclass
class _Observations:
    anti_cheat: dict[str, str] = field(default_factory=dict)  # problem -> first evidence
    determinism: list[str] = field(default_factory=list)
    calls: int = 0
    launches: int = 0
    trials: int = 0


class _Run:
    """One candidate's verification (state of the trials and the gate results)."""

    def __init__(
        self, verifier: Verifier, spec: OpSpec, opts: VerifyOptions, digest: str, report: ProgressFn
    ):
        self.v = verifier
        self.spec = spec
        self.opts = opts
        self.digest = digest
        self.report = report
        self.device = opts.device
        self.cuda = opts.device.startswith("cuda")
        if opts.suite == "gpu":
            self.shapes = tuple(spec.gpu_shapes)
        elif opts.suite == "cpu":
            self.shapes = tuple(spec.cpu_shapes)
        else:
            self.shapes = tuple(spec.shapes_for(opts.device))
        self.seeds = opts.seeds or DEFAULT_SEEDS["cuda" if self.cuda else "cpu"]
        # correctness also at shapes no proposer has seen, drawn afresh (seed recorded)
        count = opts.unseen_shapes
        if count is None:
            count = spec.unseen.count if spec.unseen is not None else 0
        self.unseen_seed = (
            opts.unseen_seed
            if opts.unseen_seed is not None
            else int.from_bytes(os.urandom(4), "little")
        )
        self.unseen = spec.draw_unseen_shapes(
            random.Random(self.unseen_seed), count, "cuda" if self.cuda else "cpu"
        )
        self.results: dict[str, GateResult] = {}
        self.feedback = Feedback(fence=spec.fence)
        self.obs = _Observations()
        self.recycle = False
        self.flags: list[str] = []
        self.speed: dict[str, Any] = {}
        extra: list[tuple[str, Any]] = [("spec", spec), ("spec-class", type(spec))]
        problem = getattr(spec, "module", None) if spec.kind == "kernelbench" else None
        if spec.kind == "workspace":  # the reference's modules: guard them too
            for i, module in enumerate(spec.reference_modules()):  # type: ignore[attr-defined]
                extra.append((f"workspace-reference-{i}", module))
        if problem is not None:  # the reference is the problem's Model: guard it too
            extra.append(("problem", problem))
            if isinstance(getattr(problem, "Model", None), type):
                extra.append(("problem-Model", problem.Model))
        self.extra = tuple(extra)
        self.cand: candidate_mod.LoadedCandidate | None = None
        self.recorder: fence.FenceRecorder | None = None

    # --- results ------------------------------------------------------------------------
    def _set(self, gate: str, status: str, detail: str, **evidence: Any) -> None:
        self.results[gate] = GateResult(status, detail, evidence)

    def _fail(self, gate: str, detail: str, expected: str, saw: str, **evidence: Any) -> None:
        self._set(gate, FAIL, detail, **evidence)
        if not self.feedback.saw:
            self.feedback = Feedback(expected=expected, saw=saw, fence=self.spec.fence)

    def _verdict(self, kind: str | None = None) -> Verdict:
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
        )

    def _environment(self) -> dict[str, Any]:
        """The worker's environment, with the copy and matmul rates once measured."""
        env = dict(self.v.environment)
        rates = getattr(self.v._timer, "_rates", None) if self.v._timer is not None else None
        if rates:
            env["rates"] = dict(rates)
        return env

    # --- the run ------------------------------------------------------------------------
    def execute(self) -> Outcome:
        self.before = integrity.take(self.extra)
        self.threads_before = set(threading.enumerate())
        self.children_before = _children()
        self.report("load", "loading the candidate")
        try:
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
            if not self._check_integrity("loading"):
                return Outcome(self._verdict(), True)
            self.recorder = fence.FenceRecorder(
                frozenset(self.spec.forbidden_aten), builtin=self.spec.kind != "kernelbench"
            )
            try:
                self._trials()
                self._judge_after_trials()
                if self._all_passed():
                    self._speed_gate()
            except _Stop:
                self._fence_so_far()
            except _Broken as exc:
                self.recycle = True
                self._set("crash", FAIL, f"the GPU context broke: {exc}", error=str(exc))
                self.feedback = Feedback(
                    expected="the candidate's kernels run without a device fault",
                    saw=f"device fault: {exc}",
                    fence=self.spec.fence,
                )
                return Outcome(self._verdict(kind="crash"), True)
            except Exception as exc:  # a verifier error provoked by odd outputs, or a bug
                if self.cuda and not self._device_healthy():
                    self.recycle = True
                    self._set("crash", FAIL, f"the GPU context broke: {exc!r:.300}")
                    return Outcome(self._verdict(kind="crash"), True)
                line, trace = candidate_mod.describe_exception(exc, self.cand.path, limit=20)
                self.recycle = True
                self._set("crash", FAIL, f"verifier error while judging: {line}", traceback=trace)
                self.feedback = Feedback(
                    expected="outputs the verifier can judge", saw=line, fence=self.spec.fence
                )
                return Outcome(self._verdict(kind="crash"), True)
            return Outcome(self._verdict(), self.recycle)
        finally:
            candidate_mod.unload(self.cand.module_name)

    def after_walls(self, outcome: Outcome, hits: list[str], changed: list[str]) -> Outcome:
        """The verdict again when the candidate hit the sandbox's walls or changed the
        verifier's files: it fails at anti-cheat, naming the wall or the files, whatever
        the other gates said (a denied write often surfaces as a bare PermissionError)."""
        if not hits and not changed:
            return outcome
        if changed:
            shown = ", ".join(changed[:4]) + (
                f" (+{len(changed) - 4} more)" if len(changed) > 4 else ""
            )
            detail = f"the candidate changed the verifier's files: {shown}"
            flag, evidence = "verifier-files-changed", {"files": changed}
        else:
            detail = f"sandbox: {hits[0]}" + (f" (+{len(hits) - 1} more)" if len(hits) > 1 else "")
            flag, evidence = "sandbox-wall", {"walls": hits}
        if changed and hits:
            evidence["walls"] = hits
        before = GATES[: GATES.index("anti-cheat")]
        then = {g: r.detail for g, r in self.results.items() if r.status == FAIL}
        if then:  # what the other gates said, kept as evidence
            evidence["then"] = then
        for gate in list(self.results):
            if gate not in before or self.results[gate].status == FAIL:
                del self.results[gate]
        for gate in before:
            self.results.setdefault(gate, GateResult(SKIPPED, "not judged: " + detail))
        self.speed = {}
        self.feedback = Feedback(fence=self.spec.fence)
        self._fail(
            "anti-cheat",
            detail,
            expected="a candidate that stays inside the sandbox's walls and leaves the verifier's files alone",
            saw=detail,
            **evidence,
        )
        self.flags.append(flag)
        return Outcome(self._verdict(), outcome.recycle or bool(changed))

    def _fence_so_far(self) -> None:
        """After an early stop, the fence as judged on the calls that returned."""
        if "fence" in self.results or self.obs.launches == 0 or self.recorder is None:
            return
        self._set(
            "fence",
            PASS,
            f"{self.obs.launches} Triton launches over the calls made before the stop; "
            f"torch ops: {self._ops_text(self.recorder.calls)}",
            launches=self.obs.launches,
            torch_ops=dict(self.recorder.calls),
        )

    @contextlib.contextmanager
    def _reference_tripwire(self) -> Iterator[list[str]]:
        """KernelBench: calling the problem's Model.forward during the call is a fence
        violation (the reference itself)."""
        hits: list[str] = []
        if self.spec.kind == "workspace":
            with _workspace_tripwire(self.spec, hits):
                yield hits
            return
        model_cls = getattr(getattr(self.spec, "module", None), "Model", None)
        original = vars(model_cls).get("forward") if isinstance(model_cls, type) else None
        if self.spec.kind != "kernelbench" or original is None:
            yield hits
            return

        def forward(*args: Any, **kwargs: Any) -> Any:
            hits.append("Model.forward")
            return original(*args, **kwargs)

        model_cls.forward = forward
        try:
            yield hits
        finally:
            model_cls.forward = original

    def _entry_text(self) -> str:
        if self.spec.kind == "kernelbench" or getattr(self.spec, "entry", "") == "ModelNew":
            return "class ModelNew (KernelBench format)"
        return self.spec.signature.split("->")[0].strip()

    def _all_passed(self) -> bool:
        return all(r.status != FAIL for r in self.results.values())

    def _device_healthy(self) -> bool:
        try:
            TRUSTED.cuda_synchronize()
            return True
        except Exception:
            return False

    def _check_integrity(self, when: str) -> bool:
        problems = integrity.altered(self.before, self.extra)
        if not fence.launch_wrappers_intact():
            problems.append("Triton's launch entry point was replaced")
        if not problems:
            return True
        self.recycle = True
        shown = problems[:8]
        detail = f"the candidate altered the verifier while {when}: {', '.join(shown[:3])}"
        if len(problems) > 3:
            detail += f" (+{len(problems) - 3} more)"
        for gate in GATES[GATES.index("load") + 1 : GATES.index("anti-cheat")]:
            if gate not in self.results:
                self._set(gate, SKIPPED, "not judged: the candidate altered the verifier")
        self._fail(
            "anti-cheat",
            detail,
            expected="the verifier's timers, synchronization and comparisons stay untouched",
            saw=detail,
            altered=shown,
        )
        return False

    # --- one checked call -----------------------------------------------------------------
    def _checked_call(
        self, inputs: dict[str, torch.Tensor], shape: Shape, seed: int, trial: str
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        assert self.cand is not None and self.recorder is not None
        spec, state, rec = self.spec, fence.STATE, self.recorder
        args = [inputs[name] for name in spec.arg_names]
        pristine = {name: TRUSTED.tensor_clone(t) for name, t in inputs.items()}
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
        active = True
        try:
            state.watch_streams = self.cuda
            with self._reference_tripwire() as reference_calls, rec:
                result = self.cand.call(*args)
                active = rec.is_active()
        except BaseException as exc:
            state.watch_streams = False
            if self.cuda and not self._device_healthy():
                raise _Broken(f"{type(exc).__name__}: {str(exc)[:200]}") from None
            self._check_integrity("being called")
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
        if self.cuda and not self._device_healthy():
            raise _Broken("a CUDA error surfaced after the call returned")
        if not self._check_integrity("being called"):
            raise _Stop
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
                saw=f"0 Triton launches on {where}; torch ops called: {self._ops_text(rec.calls)}",
                launches=0,
                torch_ops=dict(rec.calls),
            )
            raise _Stop
        outs = self._outputs(result, shape, where)
        self._side_work(outs, state, side0, other0, stream, where)
        self._anti_cheat_after_call(outs, inputs, pristine, where)
        return outs, pristine

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

    @staticmethod
    def _ops_text(calls: Mapping[str, int]) -> str:
        if not calls:
            return "none"
        return ", ".join(f"{k}x{v}" for k, v in sorted(calls.items())[:8])

    def _outputs(self, result: Any, shape: Shape, where: str) -> tuple[torch.Tensor, ...]:
        spec = self.spec
        expected = spec.expected_outputs(shape)
        n = len(expected)
        if isinstance(result, (tuple, list)):
            outs = tuple(result)
        else:
            outs = (result,)
        # Checked before anything touches an output: a subclass could hook our comparisons.
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
                detail = f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, not a plain torch.Tensor"
                self.recycle = True
                self._set("correctness", SKIPPED, "not judged: the outputs are not plain tensors")
                self._fail("anti-cheat", detail, expected="plain torch.Tensor outputs", saw=detail)
                raise _Stop
        want = self._outputs_text(shape)
        if len(outs) != n:
            detail = f"returned {len(outs)} output(s) on {where}, expected {n}: {want}"
            self._fail("correctness", detail, expected=want, saw=detail)
            raise _Stop
        for name, o, (oshape, odtype) in zip(spec.output_names, outs, expected, strict=False):
            if not isinstance(o, torch.Tensor):
                detail = f"output {name} is a {type(o).__name__}, not a tensor, on {where}"
                self._fail("correctness", detail, expected=want, saw=detail)
                raise _Stop
            problem = None
            if tuple(o.shape) != tuple(oshape):
                problem = f"output {name} has shape {list(o.shape)}, expected {list(oshape)}"
            elif o.dtype != odtype:
                problem = f"output {name} has dtype {str(o.dtype).replace('torch.', '')}, expected {str(odtype).replace('torch.', '')}"
            elif o.device.type != torch.device(self.device).type:
                problem = f"output {name} is on {o.device}, expected {self.device}"
            if problem:
                self._fail(
                    "correctness",
                    f"{problem} on {where}",
                    expected=want,
                    saw=f"{problem} on {where}",
                )
                raise _Stop
        return outs

    def _side_work(self, outs, state, side0: int, other0: int, stream, where: str) -> None:
        if state.other_thread_launches > other0:
            self.obs.anti_cheat.setdefault(
                "launches from another thread", f"{state.other_thread_launches - other0} on {where}"
            )
        if not self.cuda:
            return
        if state.side_stream_launches > side0:
            self.obs.anti_cheat.setdefault(
                "launches on a side stream",
                f"{state.side_stream_launches - side0} Triton launches off the caller's stream on {where}",
            )
        if fence._current_stream_handle() != stream:
            self.obs.anti_cheat.setdefault(
                "left another stream current", f"the current CUDA stream changed on {where}"
            )
        # Read on the caller's stream before any device-wide sync, then after it: work
        # left running on another stream shows up as a difference.
        early = [TRUSTED.tensor_clone(o) for o in outs]
        TRUSTED.cuda_synchronize()
        if not all(_same_bits(a, b) for a, b in zip(early, outs, strict=True)):
            self.obs.anti_cheat.setdefault(
                "work left on another stream",
                f"outputs changed after a device-wide synchronize on {where}",
            )

    def _anti_cheat_after_call(self, outs, inputs, pristine, where: str) -> None:
        new_threads = [
            t
            for t in threading.enumerate()
            if t not in self.threads_before and t.is_alive() and not _compile_pool_timer(t)
        ]
        if new_threads:
            self.recycle = True
            names = ", ".join(t.name for t in new_threads[:4])
            self.obs.anti_cheat.setdefault("threads left running", f"{names} after {where}")
        children = _children() - self.children_before
        if children:
            self.recycle = True
            self.obs.anti_cheat.setdefault(
                "child processes left running", f"pids {sorted(children)[:4]} after {where}"
            )
        changed = [n for n, t in inputs.items() if not _same_bits(t, pristine[n])]
        if changed:
            self.obs.anti_cheat.setdefault(
                "inputs modified", f"{', '.join(changed)} changed by the call on {where}"
            )
        in_ranges = {n: _storage_range(t) for n, t in inputs.items()}
        for out_name, o in zip(self.spec.output_names, outs, strict=False):
            r = _storage_range(o)
            for in_name, ir in in_ranges.items():
                if _overlap(r, ir):
                    self.obs.anti_cheat.setdefault(
                        "output aliases an input",
                        f"{out_name} shares memory with input {in_name} on {where}",
                    )
        ranges = [
            (n, _storage_range(o)) for n, o in zip(self.spec.output_names, outs, strict=False)
        ]
        for i in range(len(ranges)):
            for j in range(i + 1, len(ranges)):
                if _overlap(ranges[i][1], ranges[j][1]):
                    self.obs.anti_cheat.setdefault(
                        "outputs overlap",
                        f"{ranges[i][0]} and {ranges[j][0]} share memory on {where}",
                    )

    # --- correctness --------------------------------------------------------------------
    def _judge(self, outs, hp, pristine, shape: Shape, seed: int, trial: str) -> None:
        self.obs.trials += 1
        mismatch = self.spec.compare(outs, hp, pristine, shape)
        if mismatch is None:
            return
        self._correctness_fail(mismatch, shape, seed, trial)

    def _correctness_fail(self, m: Mismatch, shape: Shape, seed: int, trial: str) -> None:
        where = f"shape '{shape.label}', seed {seed}" + (f" ({trial})" if trial else "")
        reason = f" ({m.reason})" if m.reason else ""
        detail = (
            f"{m.output}{_index_str(m.index)}: got {m.saw:.6g}, expected {m.expected:.6g}{reason}; "
            f"{m.count}/{m.total} elements out of tolerance on {where}"
        )
        self._fail(
            "correctness",
            detail,
            expected=f"{m.output}{_index_str(m.index)} = {m.expected:.8g} (high-precision reference) on {where}",
            saw=(
                f"{m.output}{_index_str(m.index)} = {m.saw:.8g}, error {m.error:.3g} > allowed "
                f"{m.allowed:.3g}{reason}; {m.count}/{m.total} elements out of tolerance; "
                f"shape '{shape.label}', seed {seed}" + (f", {trial}" if trial else "")
            ),
            output=m.output,
            index=list(m.index),
            expected_value=m.expected,
            saw_value=m.saw,
            error=m.error,
            allowed=m.allowed,
            count=m.count,
            total=m.total,
            shape=shape.label,
            seed=seed,
            trial=trial or "fresh inputs",
        )
        raise _Stop

    def _trials(self) -> None:
        spec = self.spec
        for shape in self.shapes:
            s0 = self.seeds[0]
            kept: dict[str, torch.Tensor] | None = None
            for i, seed in enumerate(self.seeds):
                self.report("correctness", f"{shape.label} seed {seed}")
                inputs = spec.make_inputs(shape, seed, self.device)
                hp = spec.reference_hp(inputs)
                outs, pristine = self._checked_call(inputs, shape, seed, "")
                self._judge(outs, hp, pristine, shape, seed, "")
                if i == 0:
                    kept = inputs
                    first = [TRUSTED.tensor_clone(o) for o in outs]
                    del hp, pristine
                    for rep in range(DETERMINISM_REPEATS):
                        again, _ = self._checked_call(inputs, shape, seed, f"repeat {rep + 1}")
                        diff = [
                            n
                            for n, a, b in zip(spec.output_names, first, again, strict=False)
                            if not _same_bits(a, b)
                        ]
                        if diff:
                            self.obs.determinism.append(
                                f"{', '.join(diff)} differ bitwise between call 1 and call {rep + 2} "
                                f"on shape '{shape.label}', seed {seed}"
                            )
                    del first, again
                del outs
            assert kept is not None
            self.report("correctness", f"{shape.label}: same input pointers, new values")
            fresh = spec.make_inputs(shape, s0 + SAME_POINTER_SEED_OFFSET, self.device)
            for name, t in kept.items():
                TRUSTED.tensor_copy_(t, fresh[name])
            del fresh
            hp = spec.reference_hp(kept)
            trial = "same input pointers, new values"
            outs, pristine = self._checked_call(kept, shape, s0 + SAME_POINTER_SEED_OFFSET, trial)
            self._judge(outs, hp, pristine, shape, s0 + SAME_POINTER_SEED_OFFSET, trial)
            del kept, outs, hp, pristine
        for i, shape in enumerate(self.unseen):
            self.report("correctness", f"unseen shape {i + 1} of {len(self.unseen)}")
            try:
                inputs = spec.make_inputs(shape, self.seeds[0], self.device)
                hp = spec.reference_hp(inputs)
                outs, pristine = self._checked_call(inputs, shape, self.seeds[0], UNSEEN_TRIAL)
                self._judge(outs, hp, pristine, shape, self.seeds[0], UNSEEN_TRIAL)
            except _Stop:
                self._wrong_at_unseen(shape)
                raise
            del inputs, hp, outs, pristine

    def _unseen_evidence(self) -> dict[str, Any]:
        return {
            "unseen_seed": self.unseen_seed,
            "unseen_shapes": [s.to_dict() for s in self.unseen],
        }

    def _wrong_at_unseen(self, shape: Shape) -> None:
        """Say that the suite passed and which unseen shape did not."""
        result = self.results.get("correctness")
        if result is None or result.status != FAIL:
            return
        lead = f"correct on the suite, wrong at an unseen shape: {shape.label}: "
        evidence = {**result.evidence, **self._unseen_evidence(), "unseen_shape": shape.to_dict()}
        self.results["correctness"] = GateResult(FAIL, lead + result.detail, evidence)
        fb = self.feedback
        if fb.saw and not fb.saw.startswith(lead):
            self.feedback = Feedback(expected=fb.expected, saw=lead + fb.saw, fence=fb.fence)

    def _judge_after_trials(self) -> None:
        rec = self.recorder
        assert rec is not None
        per_call = self.obs.launches / max(1, self.obs.calls)
        self._set(
            "fence",
            PASS,
            f"{self.obs.launches} Triton launches over {self.obs.calls} calls "
            f"({per_call:.1f} per call); torch ops: {self._ops_text(rec.calls)}",
            launches=self.obs.launches,
            calls=self.obs.calls,
            torch_ops=dict(rec.calls),
        )
        self._set(
            "correctness",
            PASS,
            f"{self.obs.trials} trials within tolerance: {len(self.shapes)} "
            f"shape{'s' if len(self.shapes) != 1 else ''} x {len(self.seeds)} seeds "
            "+ a same-pointer trial per shape"
            + (
                f" + {len(self.unseen)} unseen shape{'s' if len(self.unseen) != 1 else ''}"
                if self.unseen
                else ""
            ),
            shapes=[s.label for s in self.shapes],
            seeds=list(self.seeds),
            trials=self.obs.trials,
            poison=self.v.environment.get("poison", ""),
            **self._unseen_evidence(),
        )
        if self.obs.anti_cheat:
            first_problem, first_evidence = next(iter(self.obs.anti_cheat.items()))
            detail = f"{first_problem}: {first_evidence}"
            if len(self.obs.anti_cheat) > 1:
                detail += f" (+{len(self.obs.anti_cheat) - 1} more)"
            self._fail(
                "anti-cheat",
                detail,
                expected="inputs untouched, fresh plain outputs, no side work, verifier intact",
                saw="; ".join(f"{k}: {v}" for k, v in self.obs.anti_cheat.items()),
                problems=dict(self.obs.anti_cheat),
            )
            raise _Stop
        self._set(
            "anti-cheat",
            PASS,
            "inputs unchanged, no aliasing, plain tensors, verifier intact, "
            + ("no threads or side streams" if self.cuda else "no threads left running"),
        )
        if self.obs.determinism:
            detail = self.obs.determinism[0]
            self._fail(
                "determinism",
                detail,
                expected="bitwise-equal outputs for the same inputs",
                saw=detail,
                differences=list(self.obs.determinism),
            )
            raise _Stop
        self._set(
            "determinism",
            PASS,
            f"{1 + DETERMINISM_REPEATS} calls per shape bitwise equal",
            repeats=1 + DETERMINISM_REPEATS,
        )

    # --- speed --------------------------------------------------------------------------
    def _speed_gate(self) -> None:
        if not self.cuda and not self.v.timer_supplied:
            self._set(
                "speed", SKIPPED, "no GPU (Triton interpreter on the CPU): speed not measured"
            )
            self.feedback = Feedback(
                expected=f"outputs within tolerance on {len(self.shapes)} shapes (speed not measured without a GPU)",
                saw=f"all {self.obs.trials} trials within tolerance; speed not measured (no GPU)",
                fence=self.spec.fence,
            )
            return
        assert self.cand is not None
        spec, timer = self.spec, self.v.timer()
        call = self.cand.call
        rows: list[dict[str, Any]] = []
        for shape in self.shapes:
            self.report("speed", f"timing {shape.label}")
            inputs = spec.make_inputs(shape, self.seeds[0], self.device)
            args = [inputs[n] for n in spec.arg_names]
            ref = timer.time(lambda inputs=inputs: spec.reference(inputs))
            pristine = {name: TRUSTED.tensor_clone(t) for name, t in inputs.items()}
            last: list[Any] = [None, 0]  # the latest timed call's result, calls made

            def timed(args: list[Any] = args, last: list[Any] = last) -> None:
                last[0] = call(*args)
                last[1] += 1

            launches0 = fence.STATE.launches
            cand = timer.time(timed)
            launched = fence.STATE.launches - launches0
            if not self._check_integrity("being timed"):
                raise _Stop
            self._check_timed_calls(shape, inputs, pristine, last[0], last[1], launched)
            fl = spec.flops(shape)
            floor = timer.floor_ms(float(spec.bytes_moved(shape)), float(fl.count), fl.unit)
            baselines: dict[str, float | str] = {}
            paired: dict[str, Any] | None = None
            if self.opts.baselines:
                self.report("speed", f"baselines {shape.label}")
                with self.v.library_work():
                    baselines = self.v.baseline_ms(spec, shape, inputs)
                self.before = integrity.take(self.extra)  # torch.compile may rebind lazily
                rival = close_rival(cand, baselines)
                if self.opts.pair_every_shape and rival is None:
                    fastest = fastest_baseline(baselines)
                    rival = fastest[0] if fastest else None
                if rival is not None:
                    self.report("speed", f"{shape.label}: back to back with {rival}")
                    paired = self._paired(shape, inputs, pristine, timed, last, rival)
            del pristine, last
            rows.append(
                {
                    "shape": shape,
                    "ref": ref,
                    "cand": cand,
                    "floor": floor,
                    "baselines": baselines,
                    "paired": paired,
                }
            )
            del inputs, args
        self._speed_results(rows)

    def _paired(
        self,
        shape: Shape,
        inputs: dict[str, torch.Tensor],
        pristine: dict[str, torch.Tensor],
        timed: Callable[[], None],
        last: list[Any],
        rival: str,
    ) -> dict[str, Any] | None:
        """The candidate and its closest baseline timed back to back, paired_rounds times,
        the order alternating: a margin smaller than the drift between the candidate's
        timing and the (cached) baseline's is settled by rounds won, not by two medians
        taken minutes apart. The candidate's calls here are checked as the others are.
        None when the baseline fails here (it ran before): the plain comparison stands."""
        timer = self.v.timer()
        cand_ms: list[float] = []
        rival_ms: list[float] = []
        calls = launched = 0
        rival_fn = self.v.baseline_fns(self.spec, shape, inputs)[rival]
        failed = False
        for r in range(self.opts.paired_rounds):
            for who in ("candidate", rival) if r % 2 == 0 else (rival, "candidate"):
                if who == "candidate":
                    last[1] = 0
                    launches0 = fence.STATE.launches
                    cand_ms.append(timer.time(timed, PAIRED_TARGET_MS).median_ms)
                    launched += fence.STATE.launches - launches0
                    calls += last[1]
                    continue
                try:
                    with self.v.library_work():
                        rival_ms.append(timer.time(rival_fn, PAIRED_TARGET_MS).median_ms)
                except Exception:  # the baseline's failure is not the candidate's: no rounds
                    failed = True
                    break
            if failed:
                break
        if not self._check_integrity("being timed"):
            raise _Stop
        if calls:
            self._check_timed_calls(shape, inputs, pristine, last[0], calls, launched)
        if failed:
            return None
        return paired_result(rival, cand_ms, rival_ms)

    def _check_timed_calls(
        self,
        shape: Shape,
        inputs: dict[str, torch.Tensor],
        pristine: dict[str, torch.Tensor],
        result: Any,
        calls: int,
        launched: int,
    ) -> None:
        """The calls being timed must be the calls that were checked: each launches
        Triton, leaves the inputs alone, and the last one's outputs are right."""
        where = f"shape '{shape.label}' while being timed"
        if self.cuda:
            TRUSTED.cuda_synchronize()
        problem = ""
        if launched < calls:
            problem = f"{calls - launched} of {calls} timed calls launched no Triton kernel (cached results?) on {where}"
        elif any(not _same_bits(t, pristine[n]) for n, t in inputs.items()):
            problem = f"the inputs changed on {where}"
        else:
            outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            expected = self.spec.expected_outputs(shape)
            ok = len(outs) == len(expected) and all(
                type(o) is torch.Tensor and tuple(o.shape) == tuple(s) and o.dtype == d
                for o, (s, d) in zip(outs, expected, strict=False)
            )
            if not ok:
                problem = f"the last timed call returned outputs of the wrong kind on {where}"
            else:
                m = self.spec.compare(outs, self.spec.reference_hp(pristine), pristine, shape)
                if m is not None:
                    problem = (
                        f"the last timed call's {m.output}{_index_str(m.index)} = {m.saw:.6g}, "
                        f"expected {m.expected:.6g} on {where}"
                    )
        if problem:
            self._fail(
                "anti-cheat",
                f"the candidate behaves differently when timed: {problem}",
                expected="timed calls compute the same checked result",
                saw=problem,
            )
            raise _Stop

    def _speed_results(self, rows: list[dict[str, Any]]) -> None:
        timings: list[ShapeTiming] = []
        skipped_baselines: dict[str, str] = {}
        for row in rows:
            ref, cand, floor = row["ref"], row["cand"], row["floor"]
            b_ms = {k: v for k, v in row["baselines"].items() if isinstance(v, float)}
            for k, v in row["baselines"].items():
                if not isinstance(v, float):
                    skipped_baselines[f"{k} @ {row['shape'].label}"] = v
            timings.append(
                ShapeTiming(
                    label=row["shape"].label,
                    reference_ms=ref.median_ms,
                    candidate_ms=cand.median_ms,
                    noise=cand.noise,
                    speedup=ref.median_ms / cand.median_ms if cand.median_ms > 0 else None,
                    floor_ms=floor,
                    floor_fraction=(floor / cand.median_ms)
                    if floor and cand.median_ms > 0
                    else None,
                    baselines_ms=b_ms,
                    paired=row.get("paired"),
                )
            )
        speedup = _geomean([t.speedup or 0 for t in timings])
        names = sorted({k for t in timings for k in t.baselines_ms})
        speedup_vs = {}
        for name in names:
            g = _geomean(
                [
                    t.baselines_ms[name] / t.candidate_ms
                    for t in timings
                    if name in t.baselines_ms and t.candidate_ms
                ]
            )
            if g is not None:
                speedup_vs[name] = g
        largest = max(
            range(len(rows)),
            key=lambda i: (
                self.spec.bytes_moved(rows[i]["shape"]),
                self.spec.flops(rows[i]["shape"]).count,
            ),
        )
        noise = max((t.noise for t in timings if t.noise is not None), default=None)
        self.speed = {
            "speedup": speedup,
            "speedup_vs": speedup_vs,
            "floor_fraction": timings[largest].floor_fraction,
            "noise": noise,
            "timings": timings,
        }
        rates = self.v.timer().rates()
        evidence = {
            "per_shape": [
                {
                    "shape": t.label,
                    "reference_ms": t.reference_ms,
                    "candidate_ms": t.candidate_ms,
                    "speedup": t.speedup,
                    "noise": t.noise,
                    "floor_ms": t.floor_ms,
                    "floor_fraction": t.floor_fraction,
                    "baselines_ms": t.baselines_ms,
                    "paired": t.paired,
                    "trials": rows[i]["cand"].trials,
                }
                for i, t in enumerate(timings)
            ],
            "speedup_vs": speedup_vs,
            "rates": {k: v for k, v in rates.items()},
            "skipped_baselines": skipped_baselines,
            "min_speedup": self.opts.min_speedup,
        }
        ref_text = "; ".join(f"{t.label}: {_fmt_ms(t.reference_ms)}" for t in timings)
        cand_text = "; ".join(
            f"{t.label}: {_fmt_ms(t.candidate_ms)} ({t.speedup:.2f}x"
            + (f", {t.floor_fraction:.0%} of floor" if t.floor_fraction else "")
            + ")"
            for t in timings
        )
        best_lib = min(speedup_vs.items(), key=lambda kv: kv[1]) if speedup_vs else None
        expected = f"time to beat (reference, x{self.opts.min_speedup:g} needed): {ref_text}"
        if best_lib:
            expected += (
                f"; best library baseline {best_lib[0]} (candidate is {best_lib[1]:.2f}x it)"
            )
        saw = (
            f"candidate {cand_text}; geomean speedup {speedup:.3f}x"
            if speedup
            else f"candidate {cand_text}"
        )
        if speedup is None:
            self._fail("speed", "no valid timing", expected=expected, saw=saw, **evidence)
            return
        if best_lib and best_lib[1] > SUSPICIOUS_SPEEDUP:
            self.flags.append(FLAG_SUSPICIOUS)
            detail = (
                f"speedup {best_lib[1]:.1f}x over the best library baseline ({best_lib[0]}) "
                f"exceeds {SUSPICIOUS_SPEEDUP:g}x: flagged as suspicious"
            )
            self._set("anti-cheat", FAIL, detail, flag=FLAG_SUSPICIOUS, speedup_vs=speedup_vs)
            self.feedback = Feedback(
                expected=expected, saw=f"{detail}; {saw}", fence=self.spec.fence
            )
        detail = (
            f"{speedup:.3f}x over the reference (geomean of {len(timings)} shapes; "
            f"min {self.opts.min_speedup:g}x), noise {noise:.1%}"
            if noise is not None
            else f"{speedup:.3f}x over the reference"
        )
        if best_lib:
            detail += f"; {best_lib[1]:.2f}x vs {best_lib[0]}"
        if speedup >= self.opts.min_speedup:
            self._set("speed", PASS, detail, **evidence)
            if not self.feedback.saw:
                self.feedback = Feedback(expected=expected, saw=saw, fence=self.spec.fence)
        else:
            self._fail("speed", f"too slow: {detail}", expected=expected, saw=saw, **evidence)


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
