"""The reference's outputs for every trial, taken before the candidate loads: the
expected outputs come from code no candidate ran beside.

Before a candidate's module is imported, the worker draws the inputs of every trial it
is about to run (each shape of the suite at each seed, the same-pointer trials' new
values, the unseen shapes) and computes the high-precision reference on them, twice;
what it keeps is a fingerprint of each output (gate_tools._digest: Python ints, not a
tensor a candidate could find and overwrite while it runs). The suite's fingerprints are
taken once per worker, before its first candidate; on a GPU the unseen shapes of the
next few verifications are drawn and fingerprinted at the same time (UNSEEN_AHEAD), so
no later verification waits for the GPU before it loads; a verification asked for a
given unseen seed (a reproduction) fingerprints its own shapes before it loads.

After each call the reference is computed again from the inputs as drawn, and it must
match its fingerprint bit for bit before it judges anything: a reference that computes
differently since the candidate loaded (an operator re-registered, a switch flipped, a
stub patched below anything an audit lists) fails the candidate at anti-cheat. A
reference whose two computations before the load differ (a nondeterministic problem) or
whose inputs do not come out the same twice (a KernelBench problem drawing from an
unseeded source) has no fingerprint, and the verdict's evidence says so.

A part of CandidateRun (candidate_run.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from kernelladder.ops.spec import Shape
from kernelladder.verifier.worker.correctness import SAME_POINTER_SEED_OFFSET
from kernelladder.verifier.worker.gate_tools import _digest, _Stop
from kernelladder.verifier.worker.measured import _spec_key

UNSEEN_AHEAD = 8  # on a GPU: verifications whose unseen shapes are fingerprinted ahead
UNFINGERPRINTED = "unfingerprinted"


def shape_key(shape: Shape) -> tuple[Any, ...]:
    return (shape.label, tuple(sorted(shape.dims.items())), shape.dtype)


class ReferenceFingerprints:
    """CandidateRun's fingerprints of the reference (it inherits them)."""

    def _trials_to_expect(self) -> list[tuple[Shape, int]]:
        """Every (shape, seed) whose reference a call of this verification is judged by."""
        s0 = self.seeds[0]
        trials = [(shape, seed) for shape in self.shapes for seed in self.seeds]
        trials += [(shape, s0 + SAME_POINTER_SEED_OFFSET) for shape in self.shapes]
        trials += [(shape, s0) for shape in self.unseen]
        return trials

    def _fingerprint_key(self, shape: Shape, seed: int) -> tuple[Any, ...]:
        return (_spec_key(self.spec), self.device, shape_key(shape), int(seed))

    def _missing_fingerprints(self, trials: Sequence[tuple[Shape, int]]) -> list:
        known = self.v.fingerprints
        return [(s, seed) for s, seed in trials if self._fingerprint_key(s, seed) not in known]

    def _prepare_judgement(self, warm: bool, missing: Sequence[tuple[Shape, int]]) -> None:
        """Before the candidate loads: the judgement's first run where this worker has
        not judged the op yet (judgement_warmup.py), and a fingerprint of the reference
        for every trial of this verification that has none (and, on a GPU, for the
        unseen shapes of the next ones: `missing`), in a stage of its own ("references",
        the GPU shared) where a pipelined verification needs the GPU for it."""
        if not warm and not missing:
            return
        if self.stage is not None and self.cuda and self._stage_at is None:
            self.report("references", f"the reference for {len(missing)} trials")
            self._enter("references", "shared")
        if warm:
            with self._part("warm-up", sync=True):
                self._warm_judgement()
        with self._part("fingerprints"):
            for shape, seed in missing:
                key = self._fingerprint_key(shape, seed)
                self.v.fingerprints[key] = self._fingerprint(shape, seed)

    def _unseen_ahead(self) -> list[tuple[Shape, int]]:
        """On a GPU, the next verifications' unseen shapes (drawn now, fingerprinted with
        this one's): they wait in the worker's pool, one set per verification."""
        if not self.cuda or not self.unseen:
            return []
        key = (_spec_key(self.spec), self.device, self.unseen_count)
        pool = self.v.unseen_pool.setdefault(key, [])
        if pool:
            return []
        trials = []
        for _ in range(UNSEEN_AHEAD):
            seed = int.from_bytes(os.urandom(4), "little")
            pool.append(seed)
            trials += [(shape, self.seeds[0]) for shape in self._draw_unseen(seed)]
        return trials

    def _fingerprint(self, shape: Shape, seed: int) -> Any:
        """The reference's outputs at (shape, seed) as digests, computed twice; None where
        the inputs or the reference do not come out the same twice."""
        spec = self.spec
        if not self._redrawable(shape):
            return None
        digests = []
        for _ in range(2):
            inputs = spec.make_inputs(shape, seed, self.device)
            outputs = spec.reference_hp(inputs)
            digests.append(tuple(_digest(o) for o in outputs))
            del inputs, outputs
        return digests[0] if digests[0] == digests[1] else None

    def _expect_reference(self, shape: Shape, seed: int, expected_hp: Sequence[Any]) -> None:
        """The reference just computed must be the one fingerprinted before the load."""
        fingerprint = self.v.fingerprints.get(self._fingerprint_key(shape, seed), UNFINGERPRINTED)
        if fingerprint is None or fingerprint is UNFINGERPRINTED:
            self.unfingerprinted.add(shape.label)
            return
        now = tuple(_digest(o) for o in expected_hp)
        if now == fingerprint:
            return
        self.recycle = True
        changed = self._state_problems_now()
        detail = (
            f"the reference's outputs on shape '{shape.label}', seed {seed} differ from "
            "those computed before the candidate loaded"
        )
        if changed:
            detail += f": {'; '.join(changed[:3])}"
        self._fail(
            "anti-cheat",
            detail,
            expected="the reference computes what it computed before the candidate loaded",
            saw=detail,
            reference_changed={"shape": shape.label, "seed": seed},
            changed=changed,
        )
        self.flags.append("reference-changed")
        raise _Stop
