"""The speed gate: the candidate timed at every shape of the suite against the reference
and the library baselines (timing.py times), back-to-back rounds with the fastest
baseline when the two are close, the timed calls checked like any other, and the
verdict's speedup, floor fraction and standing. A part of CandidateRun
(candidate_run.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kernelladder.ops.spec import Shape
from kernelladder.verifier.contract.verdict import (
    FAIL,
    PASS,
    PRACTICAL_MARGIN,
    SKIPPED,
    Feedback,
    ShapeTiming,
    fastest_baseline,
    geomean_noise,
)
from kernelladder.verifier.worker import fence, integrity
from kernelladder.verifier.worker.gate_tools import _digest, _index_str, _same_value, _Stop
from kernelladder.verifier.worker.integrity import TRUSTED
from kernelladder.verifier.worker.paired_rounds import (
    PAIRED_BAND,
    PAIRED_BAND_MAX,
    PAIRED_ROUNDS,
    PAIRED_TARGET_MS,
    close_rival,
    paired_result,
    settled_word,
    time_rounds,
)
from kernelladder.verifier.worker.timing import TARGET_MS, Timing, pooled, time_with_plan

COARSE_TARGET_MS = 20.0  # the first look that may stop the timing early
SUSPICIOUS_SPEEDUP = 10.0  # over the best library baseline: implausible for these ops
FLAG_SUSPICIOUS = "speedup-over-10x-best-library"
# the rounds' names, also imported from here
__all__ = [
    "PAIRED_ROUNDS", "PAIRED_TARGET_MS", "SpeedGate", "close_rival", "paired_result",
    "settled_word",
]  # fmt: skip


def _fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else (f"{ms:.4f} ms" if ms < 1 else f"{ms:.3f} ms")


def _geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


class SpeedGate:
    """CandidateRun's speed gate (CandidateRun inherits it)."""

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
        looks: dict[str, Timing] = {}
        rows = self._coarse_rows(looks) if self.opts.early_stop else None
        if rows is None:  # the serial path times every shape afresh, in full
            reuse = looks if self.opts.pipeline else {}
            rows = [
                self._time_shape(shape, full=True, look=reuse.get(shape.label))
                for shape in self.shapes
            ]
        self._speed_results(rows)

    def _largest_first(self) -> list[Shape]:
        return sorted(
            self.shapes,
            key=lambda s: (self.spec.bytes_moved(s), self.spec.flops(s).count),
            reverse=True,
        )

    def _coarse_rows(self, looks: dict[str, Timing]) -> list[dict[str, Any]] | None:
        """Time where it decides something. A short first look at every shape, the
        largest first; the candidate stops there, with these coarse times, when it is
        clearly slower than its branch's best (beyond the noise band) at the largest
        shape or over all shapes (geomean), and clearly faster at none: it cannot change
        the branch's standing. Else None: every shape is timed in full, with back-to-back
        rounds where close (pipelined, the first looks, kept in `looks`, count towards
        it). The largest-shape rule alone stops nothing where every candidate meets the
        copy floor at the largest shape (rmsnorm); hence the geomean."""
        best = self.opts.early_stop or {}
        best_ms: Mapping[str, float] = best.get("timings") or {}
        best_noise: Mapping[str, float] = best.get("noise") or {}  # per shape (VerifyOptions)
        shapes = self._largest_first()
        if any(shape.label not in best_ms for shape in shapes):
            return None
        rows: dict[str, dict[str, Any]] = {}
        logs, bands = [], []
        for shape in shapes:
            row = self._time_shape(shape, full=False)
            rows[shape.label] = row
            cand, theirs = row["cand"], best_ms[shape.label]
            looks[shape.label] = cand
            if not cand.median_ms or cand.median_ms <= 0:
                return None
            spread = max(cand.noise or 0.0, float(best_noise.get(shape.label) or 0.0))
            band = min(PAIRED_BAND_MAX, max(PAIRED_BAND, 2.0 * spread))
            if cand.median_ms * (1.0 + band) < theirs:
                return None  # clearly faster here: a standing could change
            logs.append(math.log(cand.median_ms / theirs))
            bands.append(band)
        largest = shapes[0].label
        ratio = rows[largest]["cand"].median_ms / best_ms[largest]
        overall = math.exp(sum(logs) / len(logs))
        # the geomean's band: the shapes' bands combined as independent errors of a mean
        band_overall = max(PAIRED_BAND, math.sqrt(sum(b * b for b in bands)) / len(bands))
        if ratio > 1.0 + bands[0]:
            where, mine, theirs = largest, rows[largest]["cand"].median_ms, best_ms[largest]
        elif overall > 1.0 + band_overall:
            where, mine, theirs = "geomean", overall, 1.0
        else:
            return None
        self.early_stop = {
            "attempt": best.get("attempt"),
            "shape": where,
            "candidate_ms": mine,
            "best_ms": theirs,
            "ratio": ratio if where == largest else overall,
            "band": bands[0] if where == largest else band_overall,
        }
        return [rows[shape.label] for shape in self.shapes]

    def _time_shape(self, shape: Shape, full: bool, look: Timing | None = None) -> dict[str, Any]:
        """One shape timed: the candidate (in full, or a coarse first measurement), the
        reference, the library baselines (cached) and, in full, back-to-back rounds with
        the fastest baseline when the two are close.

        Pipelined, a full timing starts from a first look (`look`, when the early stop
        took it already): close to the fastest baseline, the rounds follow and the
        candidate's time is all its trials, the look's and the rounds'; else more trials
        to TARGET_MS in all. The serial path times the candidate to TARGET_MS and then,
        where close, runs the rounds as well."""
        spec, timer = self.spec, self.v.timer()
        call = self.cand.call
        pipelined = self.opts.pipeline
        first_look = pipelined and full
        self.report(
            "speed",
            f"timing {shape.label}" + ("" if full and not first_look else " (first look)"),
        )
        with self._part("inputs", sync=True):
            inputs = spec.make_inputs(shape, self.seeds[0], self.device)
        args = [inputs[n] for n in spec.arg_names]
        before_timing = self._audit_before_baselines
        with self._part("timing.reference"):
            if pipelined:
                ref = self.v.reference_timing(spec, shape, inputs, before=before_timing)
            else:
                before_timing()
                ref = timer.time(lambda inputs=inputs: spec.reference(inputs))
        held = self._held_copy(inputs, shape)  # None: drawn again after the calls
        last: list[Any] = [None, 0]  # the latest timed call's result, calls made
        state = fence.STATE
        stream = fence._current_stream_handle() if self.cuda else None
        side0 = state.side_stream_launches

        def timed(args: list[Any] = args, last: list[Any] = last) -> None:
            state.expected_stream, state.watch_streams = stream, self.cuda
            try:
                last[0] = call(*args)
            finally:
                state.watch_streams = False
            last[1] += 1

        def timed_checked(target_ms: float) -> Timing:
            """The candidate timed to `target_ms`, then the verifier and torch's state
            intact and the timed calls the checked calls."""
            last[1] = 0
            launches0 = fence.STATE.launches
            self._candidate_runs("being timed")
            self.unaudited = self.since_end = self.timed = True
            with self._part("timing.candidate"):
                timing = time_with_plan(
                    timer, timed, target_ms, self._plans.setdefault(shape.label, {})
                )
            launched = fence.STATE.launches - launches0
            if not self._check_integrity("being timed"):
                raise _Stop
            self._check_state_or_stop("being timed")
            self._check_timed_calls(
                shape, inputs, held, last[0], last[1], launched, state.side_stream_launches - side0
            )
            return timing

        if look is not None:
            cand = look  # taken, checked, by the early stop's first look
        else:
            cand = timed_checked(TARGET_MS if full and not first_look else COARSE_TARGET_MS)
        fl = spec.flops(shape)
        floor = timer.floor_ms(float(spec.bytes_moved(shape)), float(fl.count), fl.unit)
        baselines: dict[str, float | str] = {}
        paired: dict[str, Any] | None = None
        rounds: list[Timing] = []
        if self.opts.baselines:
            self.report("speed", f"baselines {shape.label}")
            timed_before, compiles_before = self.v.baselines_timed, self.v.compiles
            with self._part("timing.baselines"), self.v.library_work():
                baselines = self.v.baseline_ms(
                    spec, shape, inputs, refresh=pipelined, before=before_timing
                )
            if self.v.baselines_timed != timed_before:  # torch.compile may rebind lazily
                self.before = integrity.take(self.extra)  # (cached times ran nothing)
            if self.v.compiles != compiles_before:  # a first compile defines and registers:
                self.state = self.v.refresh_state()  # taken again, after a full audit
            rival = close_rival(cand, baselines) if full else None
            if full and self.opts.pair_every_shape and rival is None:
                fastest = fastest_baseline(baselines)
                rival = fastest[0] if fastest else None
            if rival is not None:
                self.report("speed", f"{shape.label}: back to back with {rival}")
                paired = self._paired(shape, inputs, held, timed, last, rival, rounds, side0)
        if first_look:
            if paired is not None:
                cand = pooled([cand, *rounds])
            else:
                self.report("speed", f"timing {shape.label}")
                cand = pooled([cand, timed_checked(TARGET_MS - COARSE_TARGET_MS)])
        return {
            "shape": shape,
            "ref": ref,
            "cand": cand,
            "floor": floor,
            "baselines": baselines,
            "paired": paired,
        }

    def _paired(
        self,
        shape: Shape,
        inputs: dict[str, torch.Tensor],
        held: dict[str, Any] | None,
        timed: Callable[[], None],
        last: list[Any],
        rival: str,
        timings: list[Timing] | None = None,
        side0: int = 0,
    ) -> dict[str, Any] | None:
        """The candidate and its closest baseline timed back to back, paired_rounds times,
        the order alternating: a margin smaller than the drift between the candidate's
        timing and the (cached) baseline's is settled by rounds won, not by two medians
        taken minutes apart. The candidate's calls here are checked as the others are;
        its timings are added to `timings`. Torch's state is audited before each round's
        baseline (the candidate's round ran just before it). None when the baseline fails
        here (it ran before): the plain comparison stands."""
        self._check_state_or_stop("being timed")  # each round's baseline: as cheaply again
        self.unaudited = self.since_end = self.timed = True
        with self._part("rounds"):
            rounds = time_rounds(
                self.v.timer(),
                timed,
                self.v.baseline_fns(self.spec, shape, inputs)[rival],
                self.opts.paired_rounds,
                self.v.library_work,
                last,
                timings,
                self._rounds_settled,
                candidate_plan=self._plans.setdefault(shape.label, {}),
                before_rival=lambda: self._check_state_or_stop("being timed"),
                before_candidate=lambda: self._candidate_runs("being timed"),
            )
        if not self._check_integrity("being timed"):
            raise _Stop
        self._check_state_or_stop("being timed")
        if rounds.calls:
            self._check_timed_calls(
                shape,
                inputs,
                held,
                last[0],
                rounds.calls,
                rounds.launched,
                fence.STATE.side_stream_launches - side0,
            )
        if rounds.failed:
            return None
        return paired_result(rival, rounds.candidate_ms, rounds.rival_ms)

    def _rounds_settled(self, cand_ms: Sequence[float], rival_ms: Sequence[float]) -> bool:
        """With paired_min_rounds, whether the rounds' word is settled (settled_word)
        after at least that many rounds: the rest would not change it."""
        least = self.opts.paired_min_rounds
        if least is None or len(cand_ms) != len(rival_ms) or len(cand_ms) < least:
            return False
        return settled_word(cand_ms, rival_ms, self.opts.paired_rounds) is not None

    def _check_timed_calls(
        self,
        shape: Shape,
        inputs: dict[str, torch.Tensor],
        held: dict[str, Any] | None,
        result: Any,
        calls: int,
        launched: int,
        side_launches: int = 0,
    ) -> None:
        """The calls being timed must be the calls that were checked: each launches
        Triton on the stream the timer's events are on, leaves the inputs alone (as drawn
        again now, or as the copy held through the calls says), and the last one's
        outputs are right: bit for bit the outputs of the checked call on these inputs
        (its digests; the determinism gate found that call's outputs the same on every
        call), else judged against the reference fingerprinted before the load."""
        where = f"shape '{shape.label}' while being timed"
        with self._part("check"):
            if self.cuda:
                TRUSTED.cuda_synchronize()
            drawn = self._inputs_as_drawn(held, shape, self.seeds[0])
            if launched < calls:
                problem = f"{calls - launched} of {calls} timed calls launched no Triton kernel (cached results?) on {where}"
            elif side_launches:
                problem = f"{side_launches} Triton launches off the timed stream on {where}"
            elif any(not _same_value(t, drawn[n]) for n, t in inputs.items()):
                problem = f"the inputs changed on {where}"
            else:
                problem = self._timed_outputs_problem(shape, drawn, held, result, where)
            if problem:
                self._fail(
                    "anti-cheat",
                    f"the candidate behaves differently when timed: {problem}",
                    expected="timed calls compute the same checked result",
                    saw=problem,
                )
                raise _Stop

    def _timed_outputs_problem(
        self,
        shape: Shape,
        drawn: dict[str, Any],
        held: dict[str, Any] | None,
        result: Any,
        where: str,
    ) -> str:
        """What is wrong with the last timed call's outputs ("" if nothing)."""
        outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        expected = self.spec.expected_outputs(shape)
        ok = len(outs) == len(expected) and all(
            type(o) is torch.Tensor and tuple(o.shape) == tuple(s) and o.dtype == d
            for o, (s, d) in zip(outs, expected, strict=False)
        )
        # inputs drawn again bit for bit (held is None): the checked call's inputs
        checked = self.checked_digests.get(shape.label) if held is None else None
        if not ok:
            return f"the last timed call returned outputs of the wrong kind on {where}"
        if checked is not None and checked == [_digest(o) for o in outs]:
            return ""  # the checked call's outputs, bit for bit
        expected_hp = self.spec.reference_hp(drawn)
        self._expect_reference(shape, self.seeds[0], expected_hp)
        m = self.spec.compare(outs, expected_hp, drawn, shape)
        if m is None:
            return ""
        return (
            f"the last timed call's {m.output}{_index_str(m.index)} = {m.saw:.6g}, "
            f"expected {m.expected:.6g} on {where}"
        )

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
        noise_of_geomean = geomean_noise([t.noise for t in timings])
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
            "noise_of_geomean": noise_of_geomean,
            "practical_margin": PRACTICAL_MARGIN,
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
        threshold = f"pass threshold {self.opts.min_speedup:g}x over the reference"
        detail = (
            f"{speedup:.3f}x over the reference (geomean of {len(timings)} shapes; {threshold})"
        )
        if noise is not None and noise_of_geomean is not None:
            detail += (
                f", noise of the geomean {noise_of_geomean:.1%} (noisiest shape {noise:.1%}); "
                f"faster/slower beyond {PRACTICAL_MARGIN:.0%}"
            )
        if best_lib:
            detail = f"{best_lib[1]:.2f}x vs {best_lib[0]}; " + detail
        stop = self.early_stop
        if stop:
            evidence["early_stop"] = dict(stop)
            where = (
                f"{stop['ratio']:.3f}x its time over all shapes (geomean)"
                if stop["shape"] == "geomean"
                else f"{stop['shape']} {_fmt_ms(stop['candidate_ms'])} against its "
                f"{_fmt_ms(stop['best_ms'])}"
            )
            detail = (
                f"stopped early, not faster than #{stop['attempt']}: {where}, beyond the "
                f"{stop['band']:.0%} noise band (coarse times at every shape); " + detail
            )
        if speedup >= self.opts.min_speedup:
            self._set("speed", PASS, detail, **evidence)
            if not self.feedback.saw:
                self.feedback = Feedback(expected=expected, saw=saw, fence=self.spec.fence)
        else:
            self._fail("speed", f"too slow: {detail}", expected=expected, saw=saw, **evidence)
