"""The patched model against the unpatched one, on the same prompt.

1. Unpatched: a prefill, then greedy decoding of N tokens with a KV cache; the logits of
   the prompt's last positions and of every step are kept.
2. Patched, checking every kernel call against the model's own code on the same inputs
   (calls.py): the same prefill, then the same N steps fed the unpatched run's tokens,
   so each step is compared on the same prefix.
3. Logits within LOGITS_TOL[dtype] x the RMS of the unpatched logits; at every step the
   patched model's greedy token equal to the unpatched one, except at a near-tie: where
   the unpatched model's two best logits lie closer than twice the deviation the patched
   logits show at that step, a correct kernel's rounding may swap them.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.deploy.calls import KernelCalls, KernelFailed

# |patched - unpatched| <= LOGITS_TOL x RMS(unpatched logits), per dtype. Two correct
# attention implementations of transformers (eager, SDPA) differ on random-weight Llama
# configs (hidden 64-512, 2-4 layers) by up to 4.4% of the RMS in bf16, 0.55% in fp16,
# 2.6e-6 in fp32 (measured on the CPU, 2026-12): the bounds keep a margin of 2-4x.
LOGITS_TOL: dict[torch.dtype, float] = {
    torch.float32: 1e-4,
    torch.float16: 2e-2,
    torch.bfloat16: 1e-1,
}
CHECK_POSITIONS = 32  # the prompt's last positions whose logits are compared
# A bf16 or fp16 model's logits move by rounding alone, more the wider and deeper it is (on
# the full-width Llama-3-8B shape with 2 layers a correct rmsnorm kernel moved them by 0.92
# of the fixed bound above, on the CPU): the bound is also this many times the unpatched
# model's own error against the same model run in float32. Two independent roundings of
# one size differ by about sqrt(2) times either one's error; 3 leaves room.
OWN_ERROR_FACTOR = 3.0
HALF_DTYPES = (torch.bfloat16, torch.float16)


@dataclass
class Trace:
    """One run: the compared logits (fp32) and each step's greedy token."""

    prefill: torch.Tensor  # [B, P, V]: the prompt's last positions
    first_position: int = 0  # the prompt position of prefill[:, 0]
    steps: list[torch.Tensor] = field(default_factory=list)  # [B, V] per generated token
    tokens: list[torch.Tensor] = field(default_factory=list)  # [B] per generated token


def forward_kwarg(model: Any) -> str:
    """The name the model's forward gives the KV cache: `cache` (transformers >= 5.2x)
    or `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model: Any, make_cache: Callable[[], Any] | None) -> Any:
    if make_cache is not None:
        return make_cache()
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=model.config)


def generate(
    model: Any,
    ids: torch.Tensor,
    new_tokens: int,
    calls: KernelCalls,
    *,
    make_cache: Callable[[], Any] | None,
    forced: list[torch.Tensor] | None = None,
    keep: int = CHECK_POSITIONS,
) -> Trace:
    """A prefill and `new_tokens` greedy steps; `forced`: feed these tokens instead of
    the run's own choices (the patched run follows the unpatched one's tokens)."""
    kw = forward_kwarg(model)
    cache = new_cache(model, make_cache)
    keep = min(keep, ids.shape[1])
    with torch.no_grad():
        calls.phase = "prefill"
        out = model(ids, use_cache=True, logits_to_keep=keep, **{kw: cache})
        logits = out.logits[:, -keep:].float()
        trace = Trace(prefill=logits, first_position=ids.shape[1] - keep)
        last = logits[:, -1]
        for step in range(new_tokens):
            token = last.argmax(-1)
            trace.steps.append(last)
            trace.tokens.append(token)
            if step == new_tokens - 1:
                break
            feed = forced[step] if forced is not None else token
            calls.phase = f"decode step {step + 1}"
            out = model(feed[:, None], use_cache=True, logits_to_keep=1, **{kw: cache})
            last = out.logits[:, -1].float()
    return trace


def largest_deviation(reference: Trace, other: Trace) -> dict[str, Any]:
    """The largest |other - reference| over the compared logits, where it is and the two
    values there (inf where `other` is not finite)."""
    worst: dict[str, Any] = {"deviation": 0.0}
    pairs = [("prefill", reference.prefill, other.prefill)]
    pairs += [
        (f"step {i + 1}", r, p)
        for i, (r, p) in enumerate(zip(reference.steps, other.steps, strict=True))
    ]
    for where, r, p in pairs:
        diff = (p - r).abs()
        diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
        dev = float(diff.max().item()) if diff.numel() else 0.0
        if dev > worst["deviation"] or (math.isinf(dev) and not math.isinf(worst["deviation"])):
            flat = int(diff.flatten().argmax().item())
            index = list(_unravel(flat, tuple(diff.shape)))
            worst = {
                "deviation": dev,
                "where": _where(where, index, reference.first_position),
                "expected": float(r.flatten()[flat].item()),
                "saw": float(p.flatten()[flat].item()),
            }
    return worst


def compare_runs(
    reference: Trace, patched: Trace, dtype: torch.dtype, own_error: float | None = None
) -> dict[str, Any]:
    """The logits and tokens of the patched run against the unpatched one. `own_error`:
    how far the unpatched model's logits are from the same model run in float32 (a bf16 or
    fp16 model's own rounding at this size); the patched may differ from the unpatched by
    OWN_ERROR_FACTOR times that, when it is more than the floor."""
    ref_all = torch.cat([reference.prefill.flatten(), *[s.flatten() for s in reference.steps]])
    rms = float(ref_all.pow(2).mean().sqrt().item()) if ref_all.numel() else 0.0
    rel = LOGITS_TOL.get(dtype, LOGITS_TOL[torch.float32])
    floor = rel * rms
    allowed = max(floor, OWN_ERROR_FACTOR * own_error) if own_error is not None else floor
    worst = largest_deviation(reference, patched)
    tolerance = f"{rel:g} x the RMS of the unpatched logits ({_dtype_name(dtype)})"
    if own_error is not None:
        tolerance = (
            f"the larger of {tolerance} and {OWN_ERROR_FACTOR:g} x the unpatched model's own "
            f"error against its float32 run ({own_error:.3g})"
        )
    logits = {
        "compared": int(ref_all.numel()),
        "positions": int(reference.prefill.shape[1]) + len(reference.steps),
        "rms": rms,
        "own_error": own_error,
        "allowed": allowed,
        "tolerance": tolerance,
        "max_deviation": worst["deviation"],
        "worst": {k: v for k, v in worst.items() if k != "deviation"},
        "within": math.isfinite(worst["deviation"]) and worst["deviation"] <= allowed,
    }
    tokens = compare_tokens(reference, patched, allowed)
    return {"logits": logits, "tokens": tokens}


def compare_tokens(reference: Trace, patched: Trace, allowed: float) -> dict[str, Any]:
    """Each step's greedy token of the patched run against the unpatched one's. A
    different token is a near-tie, not a mismatch, where the patched logits of that row
    are within the logits' tolerance (`allowed`) and the unpatched model's two best
    logits lie closer than twice their deviation: a correct kernel's rounding can swap
    them there."""
    rows = int(reference.tokens[0].shape[0]) if reference.tokens else 0
    equal = 0
    near_ties: list[dict[str, Any]] = []
    first_difference: dict[str, Any] | None = None
    first_equal = len(reference.tokens)  # steps equal in every row before the first change
    for step, (rt, pt, rl, pl) in enumerate(
        zip(reference.tokens, patched.tokens, reference.steps, patched.steps, strict=True)
    ):
        same = rt == pt
        equal += int(same.sum().item())
        if bool(same.all()):
            continue
        first_equal = min(first_equal, step)
        for row in (~same).nonzero().flatten().tolist():
            top = rl[row].topk(2).values
            gap = float((top[0] - top[1]).item()) if top.numel() > 1 else math.inf
            dev = float((pl[row] - rl[row]).abs().max().item())
            entry = {
                "step": step + 1,
                "row": row,
                "expected": int(rt[row].item()),
                "saw": int(pt[row].item()),
                "gap": gap,
                "deviation": dev,
            }
            if math.isfinite(dev) and dev <= allowed and gap <= 2 * dev:
                near_ties.append(entry)
            elif first_difference is None:
                first_difference = entry
    return {
        "steps": len(reference.tokens),
        "rows": rows,
        "equal": equal,
        "total": rows * len(reference.tokens),
        "first_equal_steps": first_equal,
        "near_ties": near_ties[:8],
        "near_tie_count": len(near_ties),
        "first_difference": first_difference,
        "within": first_difference is None,
    }


def run_check(
    model: Any,
    ids: torch.Tensor,
    new_tokens: int,
    calls: KernelCalls,
    *,
    make_cache: Callable[[], Any] | None,
    dtype: torch.dtype,
    float32_twin: Callable[[], tuple[Any, Callable[[], Any] | None]] | None = None,
) -> dict[str, Any]:
    """Unpatched, then patched while checking every call; the comparison, the calls'
    counts and the first failure. A kernel that raises ends the patched run.
    `float32_twin()`: the unpatched model in float32 (the same weights) and its cache, for
    a bf16 / fp16 model's own error (compare_runs)."""
    calls.active, calls.checking = False, False
    reference = generate(model, ids, new_tokens, calls, make_cache=make_cache)
    calls.reset_counts()
    calls.active, calls.checking = True, True
    raised = False
    try:
        patched = generate(
            model, ids, new_tokens, calls, make_cache=make_cache, forced=reference.tokens
        )
    except KernelFailed:
        raised, patched = True, None
    finally:
        calls.active, calls.checking = False, False
    out: dict[str, Any] = {
        "calls": {
            "prefill": calls.count("prefill"),
            "decode": calls.count("decode"),
            "sites": len(calls.sites()),
            "checked": calls.checked,
            "out_of_tolerance": calls.failed_calls,
            "worst_ratio": calls.worst_ratio,
            "worst_site": calls.worst_site,
            "fallbacks": [
                {"phase": phase, "why": why, "calls": n}
                for (phase, why), n in sorted(calls.fallbacks.items())
            ],
        },
        "failure": calls.failure.to_dict() if calls.failure is not None else None,
    }
    if raised or patched is None:
        out["logits"], out["tokens"] = None, None
        out["status"] = "mismatch"
        return out
    own_error = None
    if float32_twin is not None and dtype in HALF_DTYPES:
        twin, twin_cache = float32_twin()
        truth = generate(
            twin, ids, new_tokens, KernelCalls(), make_cache=twin_cache, forced=reference.tokens
        )
        del twin
        own_error = largest_deviation(truth, reference)["deviation"]
    out.update(compare_runs(reference, patched, dtype, own_error))
    used = calls.count("prefill") + calls.count("decode")
    ok = calls.failure is None and out["logits"]["within"] and out["tokens"]["within"]
    out["status"] = "match" if ok and used else ("mismatch" if not ok else "not-run")
    return out


def _where(part: str, index: list[int], first_position: int) -> str:
    if part == "prefill":
        row, pos, token = index
        return f"prefill, row {row}, position {first_position + pos}, logit of token {token}"
    row, token = index
    return f"generated token {part.removeprefix('step ')}, row {row}, logit of token {token}"


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
