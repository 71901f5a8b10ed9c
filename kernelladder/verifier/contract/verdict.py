"""Verdicts: what the verifier says about one candidate. Plain data, JSON round-trippable.

Imported by the worker (on a GPU box with only torch + triton), by the engine and by the
app; it imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1

# Gate order. `crash` and `timeout` replace the gate that was running when the worker
# died or overran.
GATES: tuple[str, ...] = ("load", "fence", "correctness", "anti-cheat", "determinism", "speed")
FAULT_GATES: tuple[str, ...] = ("crash", "timeout")

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


@dataclass(frozen=True)
class GateResult:
    status: str  # "pass" | "fail" | "skipped"
    detail: str  # one line a person reads
    evidence: dict[str, Any] = field(default_factory=dict)  # numbers behind the detail


@dataclass(frozen=True)
class Feedback:
    """What a proposer is told about this attempt."""

    expected: str = ""  # what the reference gives (values at the worst index, or the time)
    saw: str = ""  # what the candidate gave (error, index, shape, seed; or its time)
    fence: str = ""  # the rules the candidate must keep
    dead_ends: tuple[str, ...] = ()  # filled by the engine, never by the verifier


@dataclass(frozen=True)
class ShapeTiming:
    label: str
    reference_ms: float | None
    candidate_ms: float | None
    noise: float | None  # relative spread of the candidate's trials (e.g. IQR / median)
    speedup: float | None  # reference_ms / candidate_ms
    floor_ms: float | None  # bytes / copy bandwidth, or flops / matmul rate, the larger
    floor_fraction: float | None  # floor_ms / candidate_ms
    baselines_ms: dict[str, float] = field(default_factory=dict)  # name -> median ms
    # When the fastest baseline was close: the candidate and it timed back to back in
    # rounds ({"baseline", "rounds", "won", "lost", "ratio", "verdict", ...}); else None
    paired: dict[str, Any] | None = None


def fastest_baseline(baselines_ms: Mapping[str, Any]) -> tuple[str, float] | None:
    """(name, ms) of the fastest baseline that ran; a baseline that could not run is
    recorded as text ("not applicable: ...", "failed: ...") and left out."""
    times = {k: float(x) for k, x in baselines_ms.items() if isinstance(x, int | float) and x > 0}
    if not times:
        return None
    name = min(times, key=lambda k: times[k])
    return name, times[name]


VERSUS_WORDS = ("faster", "tie", "slower")
BEATS_EVERY_BASELINE = "beats every baseline"  # standing_text when every shape is faster

# "Faster" or "slower" than a baseline at a shape needs a difference beyond this (relative)
# as well as the rounds' sign test: 0.24 % at the HBM floor is a tie to a kernel engineer
PRACTICAL_MARGIN = 0.01


def beyond_margin(ratio: float, margin: float = PRACTICAL_MARGIN) -> bool:
    """Is a ratio of two times (baseline / candidate) further from 1 than `margin`, either
    way (1.011 is, 0.9976 is not)?"""
    return ratio > 1.0 + margin or ratio * (1.0 + margin) < 1.0


def judged_word(word: str, ratio: float | None) -> str:
    """A recorded "faster" / "slower" with the practical margin applied: inside it, "tie".
    Recorded words of older logs are read through this, so they read as today's rule."""
    if word in ("faster", "slower") and isinstance(ratio, int | float) and ratio > 0:
        return word if beyond_margin(float(ratio)) else "tie"
    return word


def geomean_noise(noises: Sequence[float | None]) -> float | None:
    """The relative noise of a geomean over shapes from each shape's relative noise: the
    shapes' errors combined as independent errors of a mean of logs, sqrt(sum n^2) / N.
    Not the noisiest shape's trial spread: one noisy small shape moves the geomean by its
    noise over N. None when no shape has a noise."""
    vals = [float(n) for n in noises if isinstance(n, int | float) and math.isfinite(n)]
    if not vals:
        return None
    return math.sqrt(sum(n * n for n in vals)) / len(vals)


def versus_fastest_baseline(
    candidate_ms: float | None,
    baselines_ms: dict[str, float],
    noise: float | None,
    paired: dict[str, Any] | None = None,
) -> tuple[str, float, str] | None:
    """(fastest baseline's name, its time / the candidate's, "faster" | "tie" | "slower")
    at one shape. When the verifier timed the candidate and that baseline back to back
    (`paired`), its rounds decide, and a ratio inside PRACTICAL_MARGIN is a tie however
    the rounds went. Otherwise a margin inside the candidate's own timing noise (IQR /
    median), at least PRACTICAL_MARGIN, is a tie: at a hardware limit two kernels differ
    by less than the drift between timings."""
    if (
        paired
        and paired.get("verdict") in VERSUS_WORDS
        and isinstance(paired.get("ratio"), int | float)
        and paired.get("baseline") in baselines_ms
    ):
        ratio = float(paired["ratio"])
        return str(paired["baseline"]), ratio, judged_word(str(paired["verdict"]), ratio)
    fastest = fastest_baseline(baselines_ms)
    if not candidate_ms or candidate_ms <= 0 or fastest is None:
        return None
    name, base = fastest
    margin = 1.0 + max(noise or 0.0, PRACTICAL_MARGIN)
    word = (
        "faster"
        if candidate_ms * margin < base
        else "slower"
        if candidate_ms > base * margin
        else "tie"
    )
    return name, base / candidate_ms, word


def early_stop_text(early_stop: Mapping[str, Any] | None) -> str:
    """An early stop in a few words: "not faster than #4 (stopped early; coarse times)"."""
    if not early_stop:
        return ""
    return f"not faster than #{early_stop.get('attempt')} (stopped early; coarse times)"


def standing(timings: Sequence[ShapeTiming]) -> dict[str, str]:
    """Per shape label, the candidate against the fastest library baseline ("faster",
    "tie" or "slower", as versus_fastest_baseline judges it); shapes with no baseline
    that ran, or no candidate time, are left out."""
    out = {}
    for t in timings:
        versus = versus_fastest_baseline(t.candidate_ms, t.baselines_ms, t.noise, t.paired)
        if versus is not None:
            out[t.label] = versus[2]
    return out


def vs_best(timings: Sequence[ShapeTiming]) -> float | None:
    """Geomean over the shapes of the fastest baseline's time over the candidate's, each
    shape as versus_fastest_baseline gives it (the back-to-back rounds' median ratio when
    they were run); None when no shape has a baseline that ran."""
    ratios = []
    for t in timings:
        versus = versus_fastest_baseline(t.candidate_ms, t.baselines_ms, t.noise, t.paired)
        if versus is not None and versus[1] > 0 and math.isfinite(versus[1]):
            ratios.append(math.log(versus[1]))
    return math.exp(sum(ratios) / len(ratios)) if ratios else None


def standing_text(words: Mapping[str, str]) -> str:
    """standing() in a few words: "beats every baseline", or the counts per word
    ("3 faster, 2 tie"); "" when no shape has a standing."""
    if not words:
        return ""
    values = list(words.values())
    if all(w == "faster" for w in values):
        return BEATS_EVERY_BASELINE
    return ", ".join(f"{values.count(w)} {w}" for w in VERSUS_WORDS if w in values)


# a saved timing with a key this version does not know still loads
_TIMING_FIELDS = frozenset(f.name for f in fields(ShapeTiming))


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "pass" | "fail"
    kind: str  # "pass" | "fail" | "crash" | "timeout"
    gate: str | None  # first failing gate, or None
    gates: dict[str, GateResult]  # in gate order; gates after a failure are "skipped"
    op: str
    device: str  # "cuda" | "cpu"
    source_hash: str  # sha256 of the candidate source
    feedback: Feedback = field(default_factory=Feedback)
    speedup: float | None = None  # geometric mean over the suite of reference / candidate
    speedup_vs: dict[str, float] = field(default_factory=dict)  # baseline name -> geomean
    floor_fraction: float | None = None  # of the largest shape of the suite
    noise: float | None = None  # relative noise of the candidate's timings (max over shapes)
    timings: tuple[ShapeTiming, ...] = ()
    flags: tuple[str, ...] = ()  # e.g. "speedup-over-10x-best-library"
    elapsed_s: float = 0.0  # verifier wall time for this candidate
    environment: dict[str, Any] = field(default_factory=dict)  # gpu name, versions
    schema_version: int = SCHEMA_VERSION
    # The speed gate stopped after a short first measurement: the candidate was clearly
    # slower than its branch's best at the largest shape and clearly faster nowhere
    # ({"attempt": N, "shape", "candidate_ms", "best_ms", "band"}); its timings are coarse
    early_stop: dict[str, Any] | None = None
    # seconds per stage of a pipelined verification (compile, waits for the GPU,
    # correctness, speed); empty for a serial one
    stages: dict[str, float] = field(default_factory=dict)
    # where each stage's seconds went: "correctness.reference" -> (seconds, times), for
    # the candidate's calls, the inputs drawn, the reference computed again, its
    # fingerprint, the comparisons, digests, integrity checks, the audits of torch's
    # state by depth (state.cheap, state.end, state.full), timings and rounds
    stage_parts: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["feedback"]["dead_ends"] = list(self.feedback.dead_ends)
        d["timings"] = [asdict(t) for t in self.timings]
        d["flags"] = list(self.flags)
        if self.stage_parts:
            d["stage_parts"] = {k: [v[0], v[1]] for k, v in self.stage_parts.items()}
        else:
            del d["stage_parts"]  # the verdicts saved before it read the same
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        fb = d.get("feedback") or {}
        return cls(
            verdict=d["verdict"],
            kind=d.get("kind", d["verdict"]),
            gate=d.get("gate"),
            gates={
                name: GateResult(g["status"], g.get("detail", ""), dict(g.get("evidence") or {}))
                for name, g in (d.get("gates") or {}).items()
            },
            op=d.get("op", ""),
            device=d.get("device", ""),
            source_hash=d.get("source_hash", ""),
            feedback=Feedback(
                expected=fb.get("expected", ""),
                saw=fb.get("saw", ""),
                fence=fb.get("fence", ""),
                dead_ends=tuple(fb.get("dead_ends") or ()),
            ),
            speedup=d.get("speedup"),
            speedup_vs=dict(d.get("speedup_vs") or {}),
            floor_fraction=d.get("floor_fraction"),
            noise=d.get("noise"),
            timings=tuple(
                ShapeTiming(**{k: v for k, v in t.items() if k in _TIMING_FIELDS})
                for t in d.get("timings") or ()
            ),
            flags=tuple(d.get("flags") or ()),
            elapsed_s=float(d.get("elapsed_s") or 0.0),
            environment=dict(d.get("environment") or {}),
            schema_version=int(d.get("schema_version", SCHEMA_VERSION)),
            early_stop=dict(d["early_stop"]) if isinstance(d.get("early_stop"), dict) else None,
            stages={k: float(v) for k, v in (d.get("stages") or {}).items()},
            stage_parts={
                k: (float(v[0]), int(v[1]))
                for k, v in (d.get("stage_parts") or {}).items()
                if isinstance(v, (list, tuple)) and len(v) == 2
            },
        )

    def with_dead_ends(self, dead_ends: tuple[str, ...]) -> Verdict:
        fb = self.feedback
        return _replace(self, feedback=Feedback(fb.expected, fb.saw, fb.fence, dead_ends))


def _replace(v: Verdict, **changes: Any) -> Verdict:
    from dataclasses import replace

    return replace(v, **changes)


def fault_verdict(
    *,
    kind: str,
    op: str,
    device: str,
    source_hash: str,
    detail: str,
    fence: str = "",
    evidence: dict[str, Any] | None = None,
    elapsed_s: float = 0.0,
) -> Verdict:
    """A verdict for a worker that died (`crash`) or overran (`timeout`)."""
    assert kind in FAULT_GATES
    return Verdict(
        verdict=FAIL,
        kind=kind,
        gate=kind,
        gates={kind: GateResult(FAIL, detail, dict(evidence or {}))},
        op=op,
        device=device,
        source_hash=source_hash,
        feedback=Feedback(expected="the candidate returns", saw=detail, fence=fence),
        elapsed_s=elapsed_s,
    )


def source_hash(source: str) -> str:
    """The sha256 a verdict names its candidate's source by (the client checks a worker's
    verdict against its own; lone surrogates hashed as they are)."""
    return hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()
