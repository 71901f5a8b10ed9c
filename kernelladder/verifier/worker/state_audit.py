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

A change is charged to the candidate only where its code ran since the last audit: each
of its segments (the load, a checked call, a timed batch, a round, a compile) is audited
when it ends, and torch's state is looked at again as the next one begins. What changed
in between, while only the verifier's own code ran (torch sets some switches lazily the
first time the reference or a baseline runs), is set back to the clean state's value
(state_set_back.py) and named in the verdict's anti-cheat evidence (`set_back`), and the
worker retires after the verdict; what cannot be set back ends the verification as the
verifier's fault (a crash verdict, the worker replaced), never as the candidate's cheat.

A part of CandidateRun (candidate_run.py).
"""

from __future__ import annotations

from kernelladder.verifier.contract.verdict import FAIL, PASS, Feedback, GateResult
from kernelladder.verifier.worker import state_set_back, torch_state
from kernelladder.verifier.worker.gate_tools import _Stop, listed
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
        with self._part(f"state.{level}"):
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

    # --- whose change: the candidate's segments, the verifier's own code between them --
    def _candidate_runs(self, what: str) -> None:
        """Right before the candidate's code runs again: what changed since the last
        audit was the verifier's own doing (settled); from here it is the candidate's."""
        self._settle(f"before {what}")
        self.candidate_unchecked = True

    def _settle(self, when: str) -> None:
        """Where only the verifier's own code ran since torch's state was last audited:
        a switch, flag or config entry it finds changed is set back to the clean state's
        value and named (`set_back`); anything else changed ends the verification as the
        verifier's fault. Nothing here is charged to the candidate."""
        if self.candidate_unchecked or self.state is None:
            return
        settled = state_set_back.settle(self.state, CHEAP, timed=self._part("state.cheap"))
        if settled is None:
            return
        lines, left = settled
        self.set_back += [f"{line}, {when}" for line in lines]
        if left:
            self._verifier_fault(left, when)

    def _verifier_fault(self, problems: list[str], when: str) -> None:
        """Torch's state changed outside the candidate's code in a way that cannot be set
        back: the verification ends as a crash of the verifier's (the worker replaced)."""
        self.recycle = True
        self._state_crash(
            f"torch's state changed while the verifier's own code ran ({when}), not in a "
            f"call of the candidate: {listed(problems)}; the worker is replaced",
            problems,
        )
        raise _Stop

    def _state_crash(self, detail: str, problems: list[str]) -> None:
        """The verification ends as a crash: torch's state changed where the candidate's
        code did not run."""
        self._set("crash", FAIL, detail, changed=problems[:20])
        self.feedback = Feedback(
            expected="torch's state as the verifier's own work leaves it",
            saw=detail,
            fence=self.spec.fence,
        )

    def _set_back_evidence(self) -> None:
        """The verdict names what was set back, in its anti-cheat evidence."""
        result = self.results.get("anti-cheat")
        if not self.set_back or result is None or result.status != PASS:
            return
        evidence = {**result.evidence, "set_back": list(self.set_back[:20])}
        detail = result.detail
        if "set back" not in detail:
            detail += (
                "; torch's state changed while the verifier's own code ran and was set "
                f"back: {listed(self.set_back, 1)}"
            )
        self.results["anti-cheat"] = GateResult(PASS, detail, evidence)

    def _state_problems_now(self) -> list[str]:
        """What changed in torch's state (in full), for a verdict that fails for another
        reason (the reference computing differently)."""
        try:
            return self._state_changes(FULL).problems
        except Exception:
            return []

    def _check_state(self, when: str, level: str = CHEAP) -> bool:
        """Torch's state unchanged; else the candidate fails at anti-cheat, naming what
        changed, and the worker is replaced. What a CHEAP audit reads is charged only where
        the candidate's code ran since it was last read (_settle)."""
        self._settle(f"before the audit {when}")
        problems = self._state_changes(level).problems
        self.candidate_unchecked = False
        if not problems:
            return True
        self.recycle = True
        detail = f"the candidate changed torch's state while {when}: {listed(problems)}"
        self._not_judged("the candidate changed torch's state")
        self._fail("anti-cheat", detail, expected=EXPECTED_STATE, saw=detail, changed=problems[:20])
        if FLAG_STATE not in self.flags:
            self.flags.append(FLAG_STATE)
        return False

    def _audit_before_baselines(self) -> None:
        """Before a baseline or the reference is timed: torch's state proven unchanged
        since the candidate loaded, in full, if candidate code ran since the last full
        audit (the baselines never run in a state a candidate left); else what the
        verifier's own code changed since the last audit set back."""
        if self.unaudited:
            if not self._check_state("being timed", FULL):
                raise _Stop
        else:
            self._settle("before a baseline is timed")

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
        self._enter("audit", "none")  # a CPU's work: the GPU goes to the others
        try:
            self._settle("as the verification ended")
        except _Stop:
            return Outcome(self._verdict(kind="crash"), True)
        if self.timed:
            changes = self._state_changes(FULL) if self.unaudited else None
        else:
            changes = self._state_changes(END) if self.since_end else None
        retire = bool(self.own_namespaces) or bool(self.set_back)
        if changes is None or not changes.problems:
            # made again: the audit's seconds, and what was set back since
            return Outcome(self._verdict(), outcome.recycle, retire or outcome.retire)
        problems = changes.problems
        detail = f"the candidate changed torch's state: {listed(problems)}"
        self._fail_at_anti_cheat_alone(detail, EXPECTED_STATE, {"changed": problems[:20]})
        if FLAG_STATE not in self.flags:
            self.flags.append(FLAG_STATE)
        return Outcome(self._verdict(), True)
