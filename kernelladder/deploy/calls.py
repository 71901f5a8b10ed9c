"""Every call of the kernel inside the model goes through one CallSite: it runs the kernel
(patched) or the model's own code (unpatched), and while checking it runs both on the same
inputs and keeps the first disagreement, named by the module it happened in.

    calls = KernelCalls()
    out = calls.run(site, kernel=lambda: k(x, w), model=lambda: orig(x), compare=cmp)

Under torch.compile the kernel's opaque form runs (`compiled`, a torch.library custom op)
and nothing is compared: compiled runs are only timed.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class KernelFailed(Exception):
    """The kernel raised inside the model: the run cannot go on (the failure is kept)."""


@dataclass
class CallFailure:
    """The first call where the kernel and the model disagreed (or the kernel raised)."""

    site: str  # the module it happened in: "model.layers.0.input_layernorm"
    phase: str  # "prefill" | "decode step 3"
    call: int  # the site's n-th call (1-based)
    expected: str  # what the model computes there, one line
    saw: str  # what the kernel gave, one line
    detail: str = ""  # the error against the allowed, how many elements

    def to_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "phase": self.phase,
            "call": self.call,
            "expected": self.expected,
            "saw": self.saw,
            "detail": self.detail,
        }


@dataclass
class KernelCalls:
    """Where the kernel ran, where the model's own code ran instead (and why), and what
    the checks found. `active`: patched; `checking`: compare every kernel call."""

    active: bool = False
    checking: bool = False
    phase: str = "prefill"
    calls: collections.Counter = field(default_factory=collections.Counter)  # (site, phase kind)
    fallbacks: collections.Counter = field(default_factory=collections.Counter)  # (phase kind, why)
    checked: int = 0
    worst_ratio: float = 0.0  # the largest error / allowed of any checked call
    worst_site: str = ""
    failure: CallFailure | None = None
    failed_calls: int = 0  # checked calls out of tolerance (the first is `failure`)

    @property
    def phase_kind(self) -> str:
        return "decode" if self.phase.startswith("decode") else "prefill"

    def reset_counts(self) -> None:
        self.calls.clear()
        self.fallbacks.clear()

    def run(
        self,
        site: str,
        *,
        kernel: Callable[[], Any],
        model: Callable[[], Any],
        compare: Callable[[Any, Any], tuple[float, CallFailure | None]] | None = None,
        compiled: Callable[[], Any] | None = None,
    ) -> Any:
        """The site's output: the model's own (unpatched), the kernel's (patched); checked
        against the model's own on the same inputs while checking."""
        if not self.active:
            return model()
        import torch

        if torch.compiler.is_compiling():
            return (compiled or kernel)()
        self.calls[(site, self.phase_kind)] += 1
        n = self.calls[(site, self.phase_kind)]
        try:
            out = kernel()
        except Exception as exc:
            if self.failure is None:
                self.failure = CallFailure(
                    site, self.phase, n, "the model's own output",
                    f"the kernel raised {type(exc).__name__}: {_first_line(exc)}",
                )  # fmt: skip
            self.failed_calls += 1
            raise KernelFailed(str(exc)) from exc
        if self.checking and compare is not None:
            ratio, problem = compare(out, model())
            self.checked += 1
            if ratio > self.worst_ratio:
                self.worst_ratio, self.worst_site = ratio, site
            if problem is not None:
                self.failed_calls += 1
                if self.failure is None:
                    problem.site, problem.phase, problem.call = site, self.phase, n
                    self.failure = problem
        return out

    def fallback(self, why: str) -> None:
        """A call the kernel does not take (decode, a mask...): the model's own code ran."""
        if self.active:
            self.fallbacks[(self.phase_kind, why)] += 1

    def sites(self) -> list[str]:
        return sorted({site for site, _ in self.calls})

    def count(self, phase_kind: str) -> int:
        return sum(n for (_, kind), n in self.calls.items() if kind == phase_kind)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def compare_tensors(tolerance: Any, label: str) -> Callable[[Any, Any], tuple[float, Any]]:
    """A compare for one float output (or a tuple of them): the kernel's against the
    model's own, |saw - expected| <= atol + rtol * |expected| (ops.spec.Tolerance), the
    worst element named as the verifier names it."""
    from kernelladder.ops import _common

    def compare(out: Any, expected: Any) -> tuple[float, CallFailure | None]:
        outs = out if isinstance(out, tuple) else (out,)
        refs = expected if isinstance(expected, tuple) else (expected,)
        if len(outs) != len(refs):
            return float("inf"), CallFailure(
                "", "", 0, f"{len(refs)} output(s)", f"{len(outs)} output(s)"
            )
        found = []
        for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
            if tuple(o.shape) != tuple(r.shape):
                return float("inf"), CallFailure(
                    "", "", 0, f"output{i} of shape {list(r.shape)}", f"shape {list(o.shape)}"
                )
            name = f"output{i}" if len(outs) > 1 else ""
            found.append(_common.compare_floats(name, o, r, tolerance))
        ratio = headroom(outs, refs, tolerance)
        m = _common.worst(found)
        return ratio, (None if m is None else failure_from_mismatch(m, label))

    return compare


def headroom(outs: Any, refs: Any, tolerance: Any) -> float:
    """The largest |saw - expected| / allowed over the elements (1.0: at the bound)."""
    import torch

    worst = 0.0
    for o, r in zip(outs, refs, strict=True):
        of, rf = o.detach().double(), r.detach().double()
        allowed = rf.abs() * tolerance.rtol + tolerance.atol
        err = (of - rf).abs()
        finite = torch.isfinite(err) & torch.isfinite(allowed)
        if not bool(finite.all()):
            return float("inf")
        if err.numel():
            worst = max(worst, float((err / allowed.clamp_min(1e-300)).max().item()))
    return worst


def failure_from_mismatch(m: Any, label: str) -> CallFailure:
    """A verifier Mismatch (ops.spec) as EXPECTED / SAW lines."""
    where = f"{m.output}[{', '.join(str(i) for i in m.index)}]"
    return CallFailure(
        site="",
        phase="",
        call=0,
        expected=f"{label}: {m.expected:.6g} at {where}",
        saw=f"the kernel: {m.saw:.6g}",
        detail=(
            f"off by {m.error:.3g}, allowed {m.allowed:.3g}; {m.count} of {m.total} elements "
            f"out of tolerance"
            + (f" ({m.reason})" if m.reason and m.reason != "out of tolerance" else "")
        ),
    )
