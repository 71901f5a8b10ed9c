"""The anti-cheat checks made after every candidate call: outputs that are plain tensors
of the expected shapes, no work left on other streams or threads, no child processes,
inputs untouched, outputs that do not alias inputs or each other. A part of
CandidateRun (candidate_run.py)."""

from __future__ import annotations

import threading
from typing import Any

import torch

from kernelladder.ops.spec import Shape
from kernelladder.verifier.contract.verdict import (
    SKIPPED,
)
from kernelladder.verifier.worker import fence
from kernelladder.verifier.worker.gate_tools import _children, _same_bits, _same_value, _Stop
from kernelladder.verifier.worker.integrity import TRUSTED

try:  # torch.compile's compile-worker pool and its idle timer (see _compile_pool_timer)
    from torch._inductor.compile_worker.subproc_pool import SubprocPool as _POOL_CLS
    from torch._inductor.compile_worker.timer import Timer as _TIMER_CLS

    _TIMER_CHECK = _TIMER_CLS.check
except Exception:  # another torch layout: no exemption
    _POOL_CLS = _TIMER_CLS = _TIMER_CHECK = None


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


class AntiCheatChecks:
    """CandidateRun's checks of one call's outputs and side effects (it inherits them)."""

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
        changed = [n for n, t in inputs.items() if not _same_value(t, pristine[n])]
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
