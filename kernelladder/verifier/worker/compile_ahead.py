"""The pipelined verification's first stage: the candidate's Triton kernels compiled for
every shape it is about to be judged on, before it takes the GPU.

The candidate is called once per shape (the suite's and the unseen ones) on empty
tensors laid out as its inputs will be, with Triton in compile-only mode
(fence.compile_only: `JITFunction.run` compiles and loads but launches nothing, an
autotuner compiles each of its configs without benchmarking) and torch limited to
allocation and views (`NoGpuWork`: fills are skipped, anything that would compute stops
this shape's compile). No kernel of the candidate runs, so this stage needs no GPU time
and can overlap another worker's timing; the correctness gate then finds the kernels in
Triton's cache. torch.compile's reference is not compiled here: inductor benchmarks its
kernels' configs as it first runs them, which wants the GPU to itself (the speed stage). A shape whose compile stops early (the candidate raised, wanted a value,
called torch compute) is simply compiled later, in the correctness gate, as in a serial
verification: nothing here is judged, except that the candidate must leave the verifier
intact. A part of CandidateRun (candidate_run.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelladder.ops.spec import Shape, aten_name
from kernelladder.verifier.worker import fence
from kernelladder.verifier.worker.gate_tools import _Stop
from kernelladder.verifier.worker.integrity import TRUSTED

_IN_PLACE_FILLS = frozenset({"aten::zero_", "aten::fill_"})
_FILLED_ALLOCATIONS = frozenset(
    {"aten::zeros", "aten::full", "aten::zeros_like", "aten::full_like", "aten::new_zeros",
     "aten::new_full"}
)  # fmt: skip
# The fence's allowed ops that run no kernel: allocation, views and metadata (fills are
# skipped instead; copies and reading a value stop the shape's compile).
_NO_KERNEL = (
    fence.ALLOWED_ATEN
    - _IN_PLACE_FILLS
    - _FILLED_ALLOCATIONS
    - {"aten::clone", "aten::copy_", "aten::_to_copy", "aten::contiguous",
       "aten::_local_scalar_dense", "aten::record_stream"}
)  # fmt: skip
COMPILE_THREADS = 4  # per worker: two workers compiling leave a 16-core box room to time
COMPILE_NICE = 10


class _CompileStopped(Exception):
    """The candidate needed real work (a value, torch compute): compile this shape later."""


def _fill_dtype(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def _empty_instead(name: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """The allocation a filled allocation makes, left unfilled."""
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    if name in ("aten::zeros", "aten::full"):
        if dtype is None and name == "aten::full":
            dtype = _fill_dtype(args[1])
        return torch.empty(tuple(args[0]), dtype=dtype, device=device)
    if name in ("aten::zeros_like", "aten::full_like"):
        return torch.empty_like(args[0], dtype=dtype, device=device)
    size = tuple(args[1])
    return args[0].new_empty(size, dtype=dtype, device=device)


class NoGpuWork(TorchDispatchMode):
    """Torch may allocate and make views; fills are skipped; anything else stops (the
    candidate's own operators run with this mode still watching inside them)."""

    def __init__(self, known_namespaces: frozenset[str] | None = None) -> None:
        super().__init__()
        self.known_namespaces = known_namespaces

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if fence.STATE.depth:  # inside Triton's own launch path
            return func(*args, **kwargs)
        if fence.own_op(func, self.known_namespaces):
            return fence.run_own_op(self, func, args, kwargs)
        name = aten_name(func)
        if name in _NO_KERNEL:
            return func(*args, **kwargs)
        if name in _IN_PLACE_FILLS:
            return args[0]
        if name in _FILLED_ALLOCATIONS:
            return _empty_instead(name, args, kwargs)
        raise _CompileStopped(name)


def _parallel_compiles() -> tuple[Any, Any]:
    """(executor, context): Triton's asynchronous compile mode over a few threads, so the
    shapes' kernels compile at once (ptxas and LLVM run outside the GIL); where this
    Triton has none, (None, a context that does nothing)."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except Exception:
        return None, contextlib.nullcontext()
    executor = ThreadPoolExecutor(
        max_workers=COMPILE_THREADS, thread_name_prefix="kl-compile", initializer=_yield_cpu
    )
    return executor, AsyncCompileMode(executor, ignore_errors=True)


def _yield_cpu() -> None:
    """A compile thread (and the ptxas it starts) runs at a lower CPU priority than the
    worker that is timing: its host-side launches must not wait for our compiles."""
    with contextlib.suppress(Exception):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), COMPILE_NICE)


class CompileAhead:
    """CandidateRun's compile stage (CandidateRun inherits it)."""

    def _compile_ahead(self) -> None:
        assert self.cand is not None
        self.since_end = True
        shapes = tuple(self.shapes) + tuple(self.unseen)
        started = TRUSTED.perf_counter()
        compiled, stopped = 0, []
        executor, parallel = _parallel_compiles()
        try:
            with parallel:  # Triton compiles the kernels of every shape at once
                for shape in shapes:
                    layout = self.v.input_layout(self.spec, shape)
                    if layout is None:
                        stopped.append(f"{shape.label}: inputs not known yet")
                        continue
                    self.report("compile", f"compiling ahead for {shape.label}")
                    self._candidate_runs("compiling ahead")
                    with self._part("calls"):
                        why = self._compile_shape(shape, layout)
                    if why:
                        stopped.append(f"{shape.label}: {why}")
                    else:
                        compiled += 1
                    self._stop_at_a_wall()
                    if not self._check_integrity("compiling ahead"):
                        raise _Stop
                    self._check_state_or_stop("compiling ahead")
        finally:
            if executor is not None:
                executor.shutdown(wait=True)  # no thread of ours outlives the stage
        took = TRUSTED.perf_counter() - started
        verb = "compiled ahead" if self.cuda else "called ahead (the interpreter compiles nothing)"
        line = f"{verb} for {compiled} of {len(shapes)} shapes in {took:.2f}s"
        if stopped:
            line += f"; later for {'; '.join(stopped[:3])}"
        self.report("compile", line)

    def _compile_shape(self, shape: Shape, layout: dict[str, Any]) -> str:
        """Compile the candidate's kernels for one shape; '' or why it stopped."""
        assert self.cand is not None
        args = [
            TRUSTED.empty_strided(size, stride, dtype=dtype, device=self.device)
            for size, stride, dtype in (layout[name] for name in self.spec.arg_names)
        ]
        try:
            known = self.recorder.known_namespaces if self.recorder is not None else None
            with fence.compile_only(), NoGpuWork(known):
                self.cand.call(*args)
        except _CompileStopped as exc:
            return f"needs {exc}"
        except BaseException as exc:  # judged where it counts, on real inputs
            return f"raised {type(exc).__name__}"
        finally:
            del args
        return ""
