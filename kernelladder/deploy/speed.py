"""Prefill and decode timed on a GPU: unpatched eager, unpatched torch.compile, patched
eager, patched torch.compile, with the verifier's discipline.

- warm-up: every variant runs once first (compiles, autotunes, allocator growth);
- CUDA events around each prefill (one forward over the prompt, a fresh KV cache, the
  last position's logits, as generate does) and around each decode (N greedy steps on
  that cache, one token per row per step);
- back-to-back rounds: each round times every variant once, in an order that rotates
  round by round, so drift falls on all four alike;
- medians over the rounds, the noise as their interquartile range over the median
  (verifier/timing.summarize), and patched against unpatched per round with the speed
  gate's sign test and practical margin (verifier/paired_rounds.paired_result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernelladder.deploy.calls import KernelCalls
from kernelladder.deploy.check import forward_kwarg, new_cache

VARIANTS = (
    ("unpatched", "eager"),
    ("unpatched", "compile"),
    ("patched", "eager"),
    ("patched", "compile"),
)
DEFAULT_ROUNDS = 7  # as the speed gate's back-to-back rounds: p = 2^-7 for "faster"
RECOMPILE_LIMIT = 64  # decode steps change the cache's length: room for its recompiles


def cuda_clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(milliseconds between CUDA events around fn, its result), device synchronized."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    result = fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)), result


def name(variant: tuple[str, str]) -> str:
    return f"{variant[0]} {'torch.compile' if variant[1] == 'compile' else 'eager'}"


def time_variants(
    model: Any,
    ids: torch.Tensor,
    new_tokens: int,
    calls: KernelCalls,
    *,
    make_cache: Callable[[], Any] | None,
    rounds: int = DEFAULT_ROUNDS,
    clock: Callable[[Callable[[], Any]], tuple[float, Any]] = cuda_clock,
    compile_model: Callable[[Any], Any] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The timing table (rows per variant, patched against unpatched); `clock` and
    `compile_model` are for tests on the CPU (the CLI times only on a GPU)."""
    from kernelladder.verifier.worker.paired_rounds import paired_result
    from kernelladder.verifier.worker.timing import summarize

    say = on_progress or (lambda _line: None)
    kw = forward_kwarg(model)
    batch, prompt = int(ids.shape[0]), int(ids.shape[1])
    steps = max(1, new_tokens - 1)  # decode forwards: the first token comes from the prefill
    runners: dict[str, Any] = {"eager": model}
    compile_error = ""
    if compile_model is None:
        _raise_recompile_limit()
        compile_model = torch.compile
    try:
        runners["compile"] = compile_model(model)
    except Exception as exc:  # torch.compile unavailable here: the compiled rows say why
        compile_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def once(variant: tuple[str, str]) -> tuple[float, float]:
        fn = runners[variant[1]]
        calls.active, calls.checking = variant[0] == "patched", False

        def prefill() -> tuple[Any, torch.Tensor]:
            calls.phase = "prefill"
            cache = new_cache(model, make_cache)
            out = fn(ids, use_cache=True, logits_to_keep=1, **{kw: cache})
            return cache, out.logits[:, -1].argmax(-1)

        def decode(cache: Any, token: torch.Tensor) -> torch.Tensor:
            calls.phase = "decode"
            for _ in range(steps):
                out = fn(token[:, None], use_cache=True, logits_to_keep=1, **{kw: cache})
                token = out.logits[:, -1].argmax(-1)
            return token

        with torch.no_grad():
            prefill_ms, (cache, token) = clock(prefill)
            decode_ms, _ = clock(lambda: decode(cache, token))
        return prefill_ms, decode_ms

    variants = [v for v in VARIANTS if v[1] in runners]
    warmup_s: dict[str, float] = {}
    try:
        for v in list(variants):
            say(f"warm-up: {name(v)}" + (" (compiling)" if v[1] == "compile" else ""))
            try:
                ms = once(v)
                warmup_s[name(v)] = round(sum(ms) / 1e3, 3)
            except Exception as exc:
                if v[1] != "compile":
                    raise
                compile_error = (
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                )
                variants = [x for x in variants if x[1] != "compile"]
        samples: dict[tuple[str, str], dict[str, list[float]]] = {
            v: {"prefill": [], "decode": []} for v in variants
        }
        for r in range(rounds):
            say(f"timing round {r + 1} of {rounds}")
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            if r % 2:
                order.reverse()
            for v in order:
                prefill_ms, decode_ms = once(v)
                samples[v]["prefill"].append(prefill_ms)
                samples[v]["decode"].append(decode_ms)
    finally:
        calls.active, calls.checking = False, False
    rows = []
    for v in VARIANTS:
        if v not in samples:
            rows.append({"variant": name(v), "measured": False, "why": compile_error or "not run"})
            continue
        pre, dec = summarize(samples[v]["prefill"]), summarize(samples[v]["decode"])
        per_token = dec.median_ms / steps
        rows.append({
            "variant": name(v),
            "measured": True,
            "prefill_ms": round(pre.median_ms, 4),
            "prefill_tok_s": round(batch * prompt / (pre.median_ms / 1e3), 1),
            "prefill_noise": round(pre.noise, 4),
            "decode_ms_per_token": round(per_token, 4),
            "decode_tok_s": round(batch * steps / (dec.median_ms / 1e3), 1),
            "decode_noise": round(dec.noise, 4),
            "prefill_samples_ms": [round(x, 4) for x in samples[v]["prefill"]],
            "decode_samples_ms": [round(x, 4) for x in samples[v]["decode"]],
        })  # fmt: skip
    comparisons = []
    for mode in ("eager", "compile"):
        cand, base = ("patched", mode), ("unpatched", mode)
        if cand not in samples or base not in samples:
            continue
        for phase in ("prefill", "decode"):
            result = paired_result(name(base), samples[cand][phase], samples[base][phase])
            comparisons.append({
                "patched": name(cand),
                "phase": phase,
                "speedup": round(float(result["ratio"]), 4),
                "standing": result["verdict"],
                "won": result["won"],
                "lost": result["lost"],
                "rounds": result["rounds"],
            })  # fmt: skip
    return {
        "rounds": rounds,
        "batch": batch,
        "prompt": prompt,
        "decode_steps": steps,
        "rows": rows,
        "comparisons": comparisons,
        "warmup_s": warmup_s,
        "compile_error": compile_error,
    }


def _raise_recompile_limit() -> None:
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    for attr in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if config is not None and isinstance(getattr(config, attr, None), int):
            setattr(config, attr, max(getattr(config, attr), RECOMPILE_LIMIT))
