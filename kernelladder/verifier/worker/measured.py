"""What a worker keeps between candidates: the GPU timer (with the copy and matmul rates
it measured, or another worker on the GPU did), the reference's and the library
baselines' times per shape, torch.compile's compiled references and the inputs' layouts.
A serial verification times the reference each time and the baselines once; a pipelined
one keeps both and times them again on a schedule (CACHE_REFRESH_S, CACHE_REFRESH_USES),
starting from what the GPU's other workers measured (take_known). The Verifier
(gates.py) is built on it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kernelladder.ops.spec import BaselineNotApplicable, OpSpec, Shape
from kernelladder.verifier.contract.verdict import source_hash
from kernelladder.verifier.worker.integrity import TRUSTED

# A pipelined verification's cached reference and baseline times are taken again after
# this many seconds or uses (a serial one times the reference each time, the baselines once).
CACHE_REFRESH_S = 120.0
CACHE_REFRESH_USES = 30
# How torch.compile's baselines are compiled (prepare_baselines): with the GPU to itself.
# Inductor benchmarks its kernels' configs as it compiles; beside correctness runs it once
# kept a config 3.7x slower (kv_quant at 4096x32x128: a candidate looked 1.5x faster).
BASELINES_GPU = "exclusive"


def set_compile_limits() -> None:
    """torch.compile's recompile limits, raised for the baselines (one compile per shape
    and op); set as the worker starts, before torch's state is taken (torch_state.py)."""
    import torch._dynamo

    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    for knob in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 8192)


def prime_compiler() -> None:
    """torch.compile's imports (inductor's, which define operators and register kernels
    as they load) made now, as a worker that may time baselines starts: what they add to
    torch's state is then no candidate's doing (torch_state.py)."""
    torch.compile(_identity, dynamic=False)


def _identity(x: Any) -> Any:
    return x


def _spec_key(spec: OpSpec) -> str:
    return spec.name + ":" + source_hash(str(getattr(spec, "source", "")))[:12]


class MeasuredTimes:
    """The timer and the times a worker measured, kept between its candidates."""

    def __init__(self, timer: Any = None) -> None:
        # A timer supplied by the caller (tests on a machine without a GPU) makes the
        # speed gate run; otherwise it runs only on CUDA with the GpuTimer.
        self._timer: Any = timer
        self.timer_supplied = timer is not None
        self._baseline_ms: dict[tuple[str, str, str], float | str] = {}
        # pipelined verifications: when each cached time was taken, and how often used
        self._taken: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._reference_timing: dict[tuple[str, str], Any] = {}  # Timing per shape
        self._layouts: dict[tuple[str, str], dict[str, tuple[Any, ...]]] = {}
        self._compiled: dict[tuple[str, str], Any] = {}
        self._prepared: set[tuple[str, str]] = set()  # compiled and run once (prepare_baselines)
        self._known_rates: dict[str, float] | None = None  # from another worker (take_known)
        self.baselines_timed = 0  # baselines run and timed by baseline_ms, all told
        self.compiles = 0  # torch.compile's baselines called a first time (each compiles)
        self._called: set[tuple[str, str]] = set()

    # --- GPU helpers (lazy: the CPU worker never touches CUDA) -------------------------
    def timer(self) -> Any:
        if self._timer is None:
            from kernelladder.verifier.worker.timing import GpuTimer

            self._timer = GpuTimer(self.device)
            if self._known_rates is not None:  # measured by another worker on this GPU
                self._timer._rates = dict(self._known_rates)
        return self._timer

    # --- what a pipelined verification keeps between candidates ------------------------
    def take_known(self, spec: OpSpec, known: Mapping[str, Any]) -> None:
        """Start from what another worker on this GPU measured, where this one has
        nothing of its own: the rates, the reference's and the baselines' times (each
        dated by its age, so the refresh schedule holds)."""
        from kernelladder.verifier.worker.timing import Timing

        rates = known.get("rates")
        if isinstance(rates, Mapping) and rates and self._known_rates is None:
            self._known_rates = {str(k): float(v) for k, v in rates.items()}
            if self._timer is not None and getattr(self._timer, "_rates", "") is None:
                self._timer._rates = dict(self._known_rates)
        now = TRUSTED.monotonic()
        spec_key = _spec_key(spec)
        for label, fact in (known.get("shapes") or {}).items():
            if not isinstance(fact, Mapping):
                continue
            taken = now - float(fact.get("age_s") or 0.0)
            ref = fact.get("reference_ms")
            if (
                isinstance(ref, int | float)
                and ref > 0
                and (spec_key, label) not in self._reference_timing
            ):
                self._reference_timing[(spec_key, label)] = Timing(float(ref), 0.0, 0)
                self._taken[(spec_key, label, "reference")] = (taken, 0)
            for name, ms in (fact.get("baselines_ms") or {}).items():
                key = (spec_key, str(label), str(name))
                if isinstance(ms, int | float) and ms > 0 and key not in self._baseline_ms:
                    self._baseline_ms[key] = float(ms)
                    self._taken[key] = (taken, 0)

    def input_layout(self, spec: OpSpec, shape: Shape) -> dict[str, tuple[Any, ...]] | None:
        """(sizes, strides, dtype) per input at this shape: the op's own description, else
        what this worker saw when it last made inputs for the shape; None: not known."""
        described = spec.input_layout(shape)
        if described is not None:
            out = {}
            for name, (sizes, dtype) in described.items():
                strides, step = [], 1
                for size in reversed(sizes):
                    strides.append(step)
                    step *= max(1, int(size))
                out[name] = (tuple(sizes), tuple(reversed(strides)), dtype)
            return out
        return self._layouts.get((_spec_key(spec), shape.label))

    def remember_layout(
        self, spec: OpSpec, shape: Shape, inputs: Mapping[str, torch.Tensor]
    ) -> None:
        key = (_spec_key(spec), shape.label)
        if key not in self._layouts:
            self._layouts[key] = {
                n: (tuple(t.shape), tuple(t.stride()), t.dtype) for n, t in inputs.items()
            }

    def _fresh(self, key: tuple[str, str, str], refresh: bool) -> bool:
        """A cached time still good: always in a serial verification; in a pipelined one,
        for CACHE_REFRESH_S seconds and CACHE_REFRESH_USES uses, then timed again."""
        if not refresh:
            return True
        taken, uses = self._taken.get(key, (0.0, 0))
        if TRUSTED.monotonic() - taken > CACHE_REFRESH_S or uses >= CACHE_REFRESH_USES:
            return False
        self._taken[key] = (taken, uses + 1)
        return True

    def _mark_taken(self, key: tuple[str, str, str]) -> None:
        self._taken[key] = (TRUSTED.monotonic(), 0)

    def reference_timing(
        self,
        spec: OpSpec,
        shape: Shape,
        inputs: Mapping[str, torch.Tensor],
        before: Callable[[], None] | None = None,
    ) -> Any:
        """The reference's Timing at this shape, timed once and kept (then refreshed on
        the schedule above): the same function on the same inputs each time. `before`
        is called first where it is timed (the audit of torch's state)."""
        key = (_spec_key(spec), shape.label)
        cached = self._reference_timing.get(key)
        if cached is None or not self._fresh((*key, "reference"), True):
            if before is not None:
                before()
            cached = self.timer().time(lambda: spec.reference(inputs))
            self._reference_timing[key] = cached
            self._mark_taken((*key, "reference"))
        return cached

    # --- baselines, cached per worker ---------------------------------------------------
    def baseline_ms(
        self,
        spec: OpSpec,
        shape: Shape,
        inputs: Mapping[str, torch.Tensor],
        refresh: bool = False,
        before: Callable[[], None] | None = None,
    ) -> dict[str, float | str]:
        """Median ms (or a reason it was skipped) of each library baseline at this shape;
        `refresh`: timed again once the cached time is past its schedule; `before`:
        called before the first one timed (the audit of torch's state)."""
        spec_key = _spec_key(spec)
        out: dict[str, float | str] = {}
        for name, fn in self.baseline_fns(spec, shape, inputs).items():
            key = (spec_key, shape.label, name)
            if key not in self._baseline_ms or not self._fresh(key, refresh):
                if before is not None:
                    before()
                    before = None
                self._mark_taken(key)
                self.baselines_timed += 1
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

    def baselines_unprepared(self, spec: OpSpec, shapes: Sequence[Shape]) -> list[Shape]:
        """The shapes whose torch.compile baseline this worker has not compiled yet."""
        if not spec.compiled_baseline or not str(self.device).startswith("cuda"):
            return []
        spec_key = _spec_key(spec)
        return [s for s in shapes if (spec_key, s.label) not in self._prepared]

    def prepare_baselines(self, spec: OpSpec, shapes: Sequence[Shape], seed: int) -> float:
        """torch.compile of the reference compiled (and run once) at each shape not yet
        done, so that no timing turn waits for a compile. Seconds taken. A compile that
        fails is left to the speed gate, which says so as before. The caller holds the GPU
        alone: inductor benchmarks its kernels' configs as it compiles."""
        start = TRUSTED.perf_counter()
        for shape in self.baselines_unprepared(spec, shapes):
            self._prepared.add((_spec_key(spec), shape.label))
            inputs = spec.make_inputs(shape, seed, self.device)
            try:
                with self.library_work():
                    self._compiled_reference(spec, shape, inputs)()
            except Exception:
                pass
            del inputs
        TRUSTED.cuda_synchronize()
        return TRUSTED.perf_counter() - start

    def library_work(self) -> Any:  # the Verifier's (gates.py) disarms the walls
        import contextlib

        return contextlib.nullcontext()

    def _compiled_reference(
        self, spec: OpSpec, shape: Shape, inputs: Mapping[str, torch.Tensor]
    ) -> Callable[[], Any]:
        key = (_spec_key(spec), shape.label)
        if key not in self._compiled:
            set_compile_limits()
            self._compiled[key] = torch.compile(spec.reference, dynamic=False)
        compiled = self._compiled[key]

        def call() -> Any:
            if key not in self._called:  # its first call compiles it
                self._called.add(key)
                self.compiles += 1
            return compiled(dict(inputs))

        return call
