"""The judgement's first run: before a worker takes torch's state for an op, the code the
verifier itself runs to judge a candidate of it runs once, on the device, at every shape
of the suite: the inputs drawn, the reference (as the speed gate times it), the
comparison and the digests on its outputs, each library baseline, torch.compile's
baseline where it is compiled ahead. Whatever torch sets lazily the
first time one of them runs (SDPA's backends' order at its first call on a Hopper GPU,
a library loaded, a handle made) is then part of the state every audit compares
against: the candidate is never charged with it. The high-precision reference runs
beside this, as its fingerprints are taken (fingerprints.py). The GPU timer is not made
here: it measures its L2 flush as it is made, which wants the GPU to itself (the speed
stage); its objects are torch._C's own and set no switch.

Once per worker and op (`Verifier.warmed`), inside the verifier's own work before the
load (gates.Verifier.own_work: the state proven unchanged before it, taken again in full
after it). Nothing it computes is kept: a baseline or a comparison that fails here fails
again where it counts, and says so there.

A part of CandidateRun (candidate_run.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

from kernelladder.verifier.worker.fingerprints import shape_key
from kernelladder.verifier.worker.gate_tools import _digest, _same_bits
from kernelladder.verifier.worker.integrity import TRUSTED
from kernelladder.verifier.worker.measured import _spec_key


class JudgementWarmup:
    """CandidateRun's first run of the judgement (it inherits it)."""

    def _warmup_key(self) -> tuple[Any, ...]:
        timed = self._times_speed() and bool(self.opts.baselines)
        return (
            _spec_key(self.spec),
            self.device,
            tuple(shape_key(s) for s in self.shapes),
            timed,
        )

    def _needs_warmup(self) -> bool:
        return self._warmup_key() not in self.v.warmed

    def _warm_judgement(self) -> None:
        spec, v = self.spec, self.v
        timed = self._times_speed()
        for shape in self.shapes:
            self.report("references", f"the judgement's first run at {shape.label}")
            inputs = spec.make_inputs(shape, self.seeds[0], self.device)
            with contextlib.suppress(Exception):
                outputs = spec.reference(inputs)
                spec.compare(outputs, spec.reference_hp(inputs), inputs, shape)
                for out in outputs:
                    _digest(out)
                    _same_bits(out, TRUSTED.tensor_clone(out))
                del outputs
            if timed and self.opts.baselines:
                self._warm_baselines(shape, inputs)
            del inputs
        if self.cuda:
            TRUSTED.cuda_synchronize()
        v.warmed.add(self._warmup_key())

    def _warm_baselines(self, shape: Any, inputs: Any) -> None:
        """Each library baseline once, and torch.compile's where it was compiled ahead
        (elsewhere its first call compiles it where it is timed, and the state is taken
        again there: speed_gate.py)."""
        spec, v = self.spec, self.v
        fns = {name: (lambda fn=fn: fn(inputs)) for name, fn in spec.library_baselines().items()}
        if spec.compiled_baseline and (_spec_key(spec), shape.label) in v._prepared:
            fns["torch.compile"] = v._compiled_reference(spec, shape, inputs)
        for fn in fns.values():
            with contextlib.suppress(Exception), v.library_work():
                fn()
