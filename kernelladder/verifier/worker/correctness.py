"""The correctness gate, with determinism: every shape of the suite at each seed, the
same inputs called again, new values written into the same tensors (results cached by
pointer fail), and shapes no proposer has seen. The reference is computed after each
call, from the inputs drawn again (input_draws.py), and must be bit for bit the one
fingerprinted before the candidate loaded (fingerprints.py); the repeats are compared
with digests of the first call's outputs: nothing the judgement reads is alive while the
candidate runs. A part of CandidateRun (candidate_run.py)."""

from __future__ import annotations

from typing import Any

import torch

from kernelladder.ops.spec import Mismatch, Shape
from kernelladder.verifier.contract.verdict import (
    FAIL,
    PASS,
    Feedback,
    GateResult,
)
from kernelladder.verifier.worker.gate_tools import _digest, _index_str, _Stop, ops_text
from kernelladder.verifier.worker.integrity import TRUSTED
from kernelladder.verifier.worker.torch_state import END

DETERMINISM_REPEATS = 2  # extra calls on the first seed's inputs
SAME_POINTER_SEED_OFFSET = 1000
UNSEEN_TRIAL = "unseen shape"


class CorrectnessTrials:
    """CandidateRun's trials and their judgement (CandidateRun inherits them)."""

    def _call_and_judge(
        self, inputs: dict[str, torch.Tensor], shape: Shape, seed: int, trial: str
    ) -> tuple[torch.Tensor, ...]:
        """One checked call, judged against the reference computed after it from the
        inputs as drawn (candidate_run.py: nothing the judgement reads exists while the
        candidate runs); its outputs."""
        outs, drawn = self._checked_call(inputs, shape, seed, trial)
        with self._part("reference", sync=True):
            expected_hp = self.spec.reference_hp(drawn)
        with self._part("fingerprint"):
            self._expect_reference(shape, seed, expected_hp)
        self._judge(outs, expected_hp, drawn, shape, seed, trial)
        return outs

    def _judge(self, outs, hp, pristine, shape: Shape, seed: int, trial: str) -> None:
        self.obs.trials += 1
        with self._part("compare"):
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
                with self._part("inputs", sync=True):
                    inputs = spec.make_inputs(shape, seed, self.device)
                self.v.remember_layout(spec, shape, inputs)
                outs = self._call_and_judge(inputs, shape, seed, "")
                if i == 0:
                    kept = inputs
                    # digests, not copies: a copy alive during the repeats is one the
                    # candidate could overwrite with its next output
                    with self._part("digest"):
                        first = [_digest(o) for o in outs]
                    self.checked_digests[shape.label] = first  # the timed calls' answer
                    for rep in range(DETERMINISM_REPEATS):
                        again, _ = self._checked_call(inputs, shape, seed, f"repeat {rep + 1}")
                        with self._part("digest"):
                            diff = [
                                n
                                for n, a, b in zip(spec.output_names, first, again, strict=False)
                                if a != _digest(b)
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
            with self._part("inputs", sync=True):
                fresh = spec.make_inputs(shape, s0 + SAME_POINTER_SEED_OFFSET, self.device)
                for name, t in kept.items():
                    TRUSTED.tensor_copy_(t, fresh[name])
                del fresh
            trial = "same input pointers, new values"
            outs = self._call_and_judge(kept, shape, s0 + SAME_POINTER_SEED_OFFSET, trial)
            del kept, outs
        for i, shape in enumerate(self.unseen):
            self.report("correctness", f"unseen shape {i + 1} of {len(self.unseen)}")
            try:
                with self._part("inputs", sync=True):
                    inputs = spec.make_inputs(shape, self.seeds[0], self.device)
                outs = self._call_and_judge(inputs, shape, self.seeds[0], UNSEEN_TRIAL)
            except _Stop:
                self._wrong_at_unseen(shape)
                raise
            del inputs, outs

    def _reference_evidence(self) -> dict[str, Any]:
        """Where the reference was judged without a fingerprint (fingerprints.py)."""
        if not self.unfingerprinted:
            return {}
        return {"reference_unfingerprinted": sorted(self.unfingerprinted)}

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
            f"({per_call:.1f} per call); torch ops: {ops_text(rec.calls)}",
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
        if not self._check_state("being verified", END):
            raise _Stop
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
            "inputs unchanged, no aliasing, plain tensors, verifier intact, torch's state "
            "unchanged, "
            + ("no threads or side streams" if self.cuda else "no threads left running"),
            **self._reference_evidence(),
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
