"""The main screen's steering: whether a steering action applies now and why not, which
gate a gate key acts on, and the actions that ask the engine for a command (prune, hints,
gates, pause and resume, open a branch, change the target, stop), through a confirmation
or prompt where one is due."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.app.messages import SteerRequested
from kernelladder.app.modals.confirm import ConfirmScreen
from kernelladder.app.modals.gate_prompt import GateDecision, GatePrompt
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.modals.input_prompt import InputPrompt
from kernelladder.app.prompt_checks import parse_target, target_error
from kernelladder.app.widgets.gates_panel import GatesPanel
from kernelladder.engine import BranchStatus

# what a gate key does with the gate in question: decide it at once (a, v) or open its
# prompt (g, enter), SteeringActions.gate_in_question
DECIDE, OPEN = "decide", "open"
APPROVE, VETO = "approve", "veto"
CLOSED = (BranchStatus.EXHAUSTED, BranchStatus.PRUNED, BranchStatus.STOPPED)


class SteeringActions:
    """Mixed into the main screen (a textual Screen), which holds what these read: the
    run's view, the selection and the gates the last notification named."""

    view: v.RunView
    selected_branch: str | None
    selected_attempt: int | None
    named_gates: tuple[str, ...]
    replay: bool
    kl_app: Any

    def _steer(
        self, command: str, *args: Any, on_done: Callable[[Any], None] | None = None
    ) -> None:
        self.post_message(SteerRequested(command, args, on_done))

    def attempts_left(self) -> int | None:
        """Attempt numbers the run may still hand out (None: no limit, or not known)."""
        limit = (self.view.settings or {}).get("max_attempts")
        return max(0, int(limit) - self.view.attempts_used) if limit else None

    def steering_refusal(self) -> str | None:
        """Why steering cannot be done now, or None when it can."""
        if self.replay:
            return "This is a replay: steering is off (start a live run to steer)."
        if getattr(self.kl_app, "read_only", False):
            return "This is a read-only view: steering is off."
        if self.kl_app.run_over or self.view.state == v.RUN_FINISHED:
            return "The run has finished: there is nothing left to steer."
        return None

    def refusal(self, action: str) -> str | None:
        """Why one steering action does nothing now (the rest of the run may be steered),
        or None when it acts."""
        name = action.split("(", 1)[0]
        if name in ("approve_gate", "veto_gate"):
            return self.gate_in_question(DECIDE)[1] or None
        if name == "open_gate":
            return self.gate_in_question(OPEN)[1] or None
        if name == "open_branch" and self.attempts_left() == 0:
            return "No attempt is left in the run's budget: a new branch could never run."
        if name == "change_target" and not self.view.speed_measured:
            return (
                "This run measures no speed (no GPU): a target could never be reached. "
                "Set one on a GPU run (--target)."
            )
        if name in ("pause_branch", "resume_branch", "prune_branch", "edit_branch_hints"):
            branch = self.view.branch(self.selected_branch)
            if branch is None:
                return "Select a branch in the strategy graph first."
            if name == "pause_branch" and branch.paused:
                return f"Branch {branch.branch_id} is paused (b resumes it)."
            if name == "resume_branch" and not branch.paused:
                return f"Branch {branch.branch_id} is not paused."
            if name in ("pause_branch", "prune_branch") and branch.state in CLOSED:
                return f"Branch {branch.branch_id} is {branch.state}: it will not run again."
        return None

    # --- steering actions -------------------------------------------------------------

    def _need_attempt(self, missing: str) -> v.AttemptView | None:
        """The selected attempt, or None once `missing` is said."""
        selected = -1 if self.selected_attempt is None else self.selected_attempt
        attempt = self.view.attempts.get(selected)
        if attempt is None:
            self.notify(missing, severity="warning")
        return attempt

    def _need_branch(self) -> v.BranchView | None:
        branch = self.view.branch(self.selected_branch)
        if branch is None:
            self.notify("Select a branch in the strategy graph first.", severity="warning")
        return branch

    def gate_in_question(
        self, key: str, gate_id: str | None = None
    ) -> tuple[v.GateView | None, str]:
        """Which gate a gate key acts on: the one answer for a, v, g, enter, their palette
        entries and the gates table. (gate, "") or (None, why not).

        A gate chosen by its row (`gate_id`), or the highlighted row while the gates
        table has the focus; else the gate of the selected attempt; else the gate the
        last notification named. A notification that named several: g (OPEN) opens the
        first still waiting, a and v (DECIDE) decide only when one of them still waits."""
        gates = self.view.gates
        if not gates:
            return None, "No gate waits for you."
        panel = self.query_one(GatesPanel)
        if gate_id is None and panel.has_focus_within:
            gate_id = panel.selected_gate
        if gate_id is not None:
            gate = self.view.gate(gate_id)
            return (gate, "") if gate is not None else (None, f"Gate {gate_id} no longer waits.")
        for gate in gates:
            if gate.attempt == self.selected_attempt:
                return gate, ""
        named = [g for gid in self.named_gates if (g := self.view.gate(gid)) is not None]
        if named and (key == OPEN or len(named) == 1):
            return named[0], ""
        waiting = ", ".join(g.gate_id for g in (named or gates))
        if named:
            return None, (
                f"{len(named)} gates wait ({waiting}): select one in the strategy graph or "
                "the gates table, or press g to decide each."
            )
        return None, (
            f"The selected attempt waits at no gate. Select a gated attempt (?) in the "
            f"strategy graph or a row of the gates table: waiting {waiting}."
        )

    def _gate_or_say(self, key: str, gate_id: str | None = None) -> v.GateView | None:
        gate, why = self.gate_in_question(key, gate_id)
        if gate is None:
            self.notify(why, severity="warning")
        return gate

    def _decide(self, gate: v.GateView, decision: str, note: str = "") -> None:
        """Send the decision; once the engine took it, a toast names the gate decided."""
        word = "approved" if decision == APPROVE else "vetoed"
        said = f"{gate.gate_id} {word}: #{gate.attempt} {gate.move}"
        if note:
            said += f" (note: {note})"

        def done(_: Any) -> None:
            self.notify(said, title=f"branch {gate.branch_id}", timeout=4)

        if decision == APPROVE:
            self._steer("approve", gate.gate_id, on_done=done)
        else:
            self._steer("veto", gate.gate_id, note, on_done=done)

    def action_prune_branch(self) -> None:
        branch = self._need_branch()
        if branch is None:
            return
        if branch.state == BranchStatus.PRUNED:
            self.notify(f"Branch {branch.branch_id} is already pruned.", severity="warning")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._steer("prune", branch.branch_id)

        self.app.push_screen(
            ConfirmScreen(
                f"Prune branch {branch.branch_id}?",
                f"{branch.branch_id} ({branch.strategy}) and every branch opened from its "
                "attempts stop; their in-flight attempts are still recorded.",
                yes="Prune",
            ),
            answer,
        )

    def action_edit_hints(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self._steer("edit_hints", text, None)

        self.app.push_screen(
            HintsEditor("global", self.view.hints, **self._hint_vocabulary()), done
        )

    def action_edit_branch_hints(self) -> None:
        branch = self._need_branch()
        if branch is None:
            return

        def done(text: str | None) -> None:
            if text is not None:
                self._steer("edit_hints", text, branch.branch_id)

        self.app.push_screen(
            HintsEditor(branch.branch_id, branch.hints, **self._hint_vocabulary()), done
        )

    def _hint_vocabulary(self) -> dict[str, str]:
        return {"op": self.view.op, "op_kind": self.view.op_kind, "proposer": self.view.proposer}

    def action_approve_gate(self) -> None:
        gate = self._gate_or_say(DECIDE)
        if gate is not None:
            self._decide(gate, APPROVE)

    def action_veto_gate(self) -> None:
        gate = self._gate_or_say(DECIDE)
        if gate is not None:
            self._decide(gate, VETO, "vetoed with v, no note given")

    def action_open_gate(self, gate_id: str | None = None) -> None:
        if why := self.steering_refusal():
            self.notify(why, severity="warning")
            return
        gate = self._gate_or_say(OPEN, gate_id)
        if gate is None:
            return

        def decided(decision: GateDecision | None) -> None:
            if decision is not None:
                self._decide(gate, decision.decision, decision.note)

        after = str((self.view.settings or {}).get("gate_timeout_policy", "veto"))
        self.app.push_screen(
            GatePrompt(gate, now=self.query_one(GatesPanel).now, after_policy=after), decided
        )

    def action_pause_run(self) -> None:
        if self.view.state == v.RUN_PAUSED:
            self.notify("The run is already paused (p resumes it).")
            return
        self._steer("pause", None)

    def action_resume_run(self) -> None:
        if self.view.state != v.RUN_PAUSED:
            self.notify("The run is not paused.")
            return
        self._steer("resume", None)

    def action_pause_branch(self) -> None:
        self._steer_branch("pause")

    def action_resume_branch(self) -> None:
        self._steer_branch("resume")

    def _steer_branch(self, command: str) -> None:
        """pause or resume the selected branch, or say why not."""
        branch = self._need_branch()
        if branch is None:
            return
        if why := self.refusal(f"{command}_branch"):
            self.notify(why, severity="warning")
            return
        self._steer(command, branch.branch_id)

    def action_open_branch(self) -> None:
        if why := self.refusal("open_branch"):
            self.notify(why, severity="warning")
            return
        attempt = self._need_attempt("Select an attempt to branch from.")
        if attempt is None:
            return

        def done(strategy: str | None) -> None:
            if strategy is None:
                return
            self._steer(
                "open_branch",
                attempt.number,
                strategy.strip() or None,
                on_done=lambda branch_id: self.notify(
                    f"Opened branch {branch_id} from #{attempt.number}."
                ),
            )

        self.app.push_screen(
            InputPrompt(
                f"Open a branch from attempt #{attempt.number}",
                "A strategy label for the new branch (empty: the proposer picks one).",
                placeholder=attempt.strategy,
            ),
            done,
        )

    def action_change_target(self) -> None:
        if why := self.refusal("change_target"):
            self.notify(why, severity="warning")
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            target = parse_target(text)
            if target == self.view.target:  # e.g. empty with no target set: no event
                self.notify(f"The target stays {fmt.speedup(target, unmeasured='none')}.")
                return
            self._steer("set_target", target)

        current = "" if self.view.target is None else f"{self.view.target:g}"
        self.app.push_screen(
            InputPrompt(
                "Change the target speedup",
                (
                    "A speedup over the reference, e.g. 1.5; empty or 'none' for no target."
                    if (self.view.settings or {}).get("target_over", "reference") == "reference"
                    else "vs best: a speedup over the fastest library baseline (geomean over "
                    "the shapes), e.g. 1.05; empty or 'none' for no target."
                ),
                value=current,
                placeholder="none",
                check=target_error,
            ),
            done,
        )

    def action_stop_run(self) -> None:
        def answer(yes: bool | None) -> None:
            if yes:
                self._steer("stop", "user")

        self.app.push_screen(
            ConfirmScreen(
                "Stop the run?",
                "No new proposals; in-flight attempts finish and are recorded, then the "
                "log is closed. A stopped run can be resumed with --resume.",
                yes="Stop run",
            ),
            answer,
        )
