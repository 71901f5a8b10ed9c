"""The audit of torch's global state around a candidate (torch_state.py says what it
reads): after each of the candidate's calls, checked or timed, and before each
back-to-back round's baseline, the switches, configs, modes and the registrations made
through torch.library (CHEAP); with the dispatch entries of the operators the judgement
runs on and the operators and shared libraries that exist after the candidate loads,
once the trials are over and as a verification that timed nothing ends (END, which goes
FULL where it finds anything); in full (every operator's dispatch entry, the Python dispatcher's tables,
torch.ops' caches) before a baseline or the reference is timed after candidate code
ran, and as a verification that timed ends. A change fails the candidate at anti-cheat,
naming it, and the worker is replaced; operators the candidate defined in a namespace
of its own are no change, but the worker retires after the verdict, so that the next
candidate finds torch as it was (and may define the same operator again).

A part of CandidateRun (candidate_run.py).
"""

from __future__ import annotations

from typing import Any

from kernelladder.verifier.contract.verdict import FAIL, GATES, SKIPPED, Feedback, GateResult
from kernelladder.verifier.worker import torch_state
from kernelladder.verifier.worker.gate_tools import _Stop
from kernelladder.verifier.worker.options import Outcome
from kernelladder.verifier.worker.registration_log import REGISTRATIONS
from kernelladder.verifier.worker.torch_state import CHEAP, END, FULL

FLAG_STATE = "torch-state-changed"
EXPECTED_STATE = (
    "torch's dispatcher, switches, configs and modes as they were before the candidate "
    "loaded (operators of a namespace of the candidate's own are allowed)"
)


class StateAudit:
    """CandidateRun's audit of torch's global state (it inherits it)."""

    def _state_changes(self, level: str) -> torch_state.Changes:
        rename = {self.cand.path: "candidate.py"} if self.cand is not None else {}
        intact = REGISTRATIONS.intact()
        changes = torch_state.changes(
            self.state,
            level if intact else FULL,
            registrations=REGISTRATIONS.take(),
            rename=rename,
        )
        if not intact:
            changes.problems.insert(0, "torch.library's door to the dispatcher was replaced")
        if level != CHEAP:
            self.own_namespaces |= changes.own_namespaces
            self.since_end = False
        if level == FULL:
            self.unaudited = False
        return changes

    def _state_problems_now(self) -> list[str]:
        """What changed in torch's state (in full), for a verdict that fails for another
        reason (the reference computing differently)."""
        try:
            return self._state_changes(FULL).problems
        except Exception:
            return []

    def _check_state(self, when: str, level: str = CHEAP) -> bool:
        """Torch's state unchanged; else the candidate fails at anti-cheat, naming what
        changed, and the worker is replaced."""
        problems = self._state_changes(level).problems
        if not problems:
            return True
        self.recycle = True
        detail = f"the candidate changed torch's state while {when}: {'; '.join(problems[:3])}"
        if len(problems) > 3:
            detail += f" (+{len(problems) - 3} more)"
        for gate in GATES[GATES.index("load") + 1 : GATES.index("anti-cheat")]:
            if gate not in self.results:
                self._set(gate, SKIPPED, "not judged: the candidate changed torch's state")
        self._fail("anti-cheat", detail, expected=EXPECTED_STATE, saw=detail, changed=problems[:20])
        if FLAG_STATE not in self.flags:
            self.flags.append(FLAG_STATE)
        return False

    def _audit_before_baselines(self) -> None:
        """Before a baseline or the reference is timed: torch's state proven unchanged
        since the candidate loaded, in full, if candidate code ran since the last full
        audit (the baselines never run in a state a candidate left)."""
        if self.unaudited and not self._check_state("being timed", FULL):
            raise _Stop

    def _check_state_or_stop(self, when: str) -> None:
        if not self._check_state(when):
            raise _Stop

    def _final_state_audit(self, outcome: Outcome) -> Outcome:
        """As the verification ends: torch's state, in full where the verification timed
        (its worker's baselines must stay as no candidate left them), else to END, where
        candidate code ran since the last full audit. A change fails a verdict that had
        not failed for it already; operators of the candidate's own retire the worker
        after the verdict."""
        if self.cand is None and not self.loaded_once:
            return outcome
        if outcome.recycle:
            return outcome  # the worker goes anyway
        if self.timed:
            changes = self._state_changes(FULL) if self.unaudited else None
        else:
            changes = self._state_changes(END) if self.since_end else None
        retire = bool(self.own_namespaces)
        if changes is None or not changes.problems:
            return Outcome(outcome.verdict, outcome.recycle, retire or outcome.retire)
        problems = changes.problems
        detail = f"the candidate changed torch's state: {'; '.join(problems[:3])}"
        if len(problems) > 3:
            detail += f" (+{len(problems) - 3} more)"
        before = GATES[: GATES.index("anti-cheat")]
        then = {g: r.detail for g, r in self.results.items() if r.status == FAIL}
        evidence: dict[str, Any] = {"changed": problems[:20]}
        if then:
            evidence["then"] = then
        for gate in list(self.results):
            if gate not in before or self.results[gate].status == FAIL:
                del self.results[gate]
        for gate in before:
            self.results.setdefault(gate, GateResult(SKIPPED, "not judged: " + detail))
        self.speed = {}
        self.early_stop = None
        self.feedback = Feedback(fence=self.spec.fence)
        self._fail("anti-cheat", detail, expected=EXPECTED_STATE, saw=detail, **evidence)
        if FLAG_STATE not in self.flags:
            self.flags.append(FLAG_STATE)
        return Outcome(self._verdict(), True)
