"""Steering commands as pure functions: the run's state and the command's arguments in,
the events it records out, or ValueError with the one line a person is shown. The run
(run.py) emits what these return; the fold (state.py) applies it."""

from __future__ import annotations

from typing import Any

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import AttemptStatus, BranchState, GateState, RunState
from kernelladder.engine.run import hints
from kernelladder.engine.run.directives import AVOID, FIX, Directives, matches
from kernelladder.engine.run.lines import one_line
from kernelladder.engine.run.rules import attempts_left

# the stop reasons a stop command may name; any other text is a user stop with that detail
STOP_RULES = {
    ev.RULE_TARGET, ev.RULE_MAX_ATTEMPTS, ev.RULE_STAGNATION, ev.RULE_REPEATED_FAILURE,
    ev.RULE_BUDGET_ATTEMPTS, ev.RULE_BUDGET_TIME, ev.RULE_BUDGET_USD, ev.RULE_BUDGET_TOKENS, ev.RULE_USER_STOP,
    ev.RULE_PROPOSER_EXHAUSTED, ev.RULE_ALL_BRANCHES_DONE, ev.RULE_ERROR,
}  # fmt: skip
STOPPED_BY = "stop"  # GateResolved.by for the gates a stop resolved


def check_live(state: RunState, *, started: bool, closed: bool) -> None:
    if not started:
        raise ValueError("the run has not started yet")
    if state.finished or closed:
        raise ValueError("the run has finished")


def branch_of(state: RunState, branch_id: str) -> BranchState:
    b = state.branches.get(branch_id)
    if b is None:
        raise ValueError(f"no branch {branch_id}")
    return b


def pending_gate(state: RunState, gate_id: str) -> GateState:
    g = state.gates.get(gate_id)
    if g is None or not g.pending:
        raise ValueError(f"no pending gate {gate_id}")
    return g


def prune_events(state: RunState, branch_id: str) -> list[ev.Event]:
    """The branch and its open sub-branches pruned; their pending gates vetoed."""
    b = branch_of(state, branch_id)
    if b.closed:
        raise ValueError(f"branch {branch_id} is already {b.status}")
    subtree = pruned_subtree(state, branch_id)
    events: list[ev.Event] = [
        ev.BranchPruned(branch_id=branch_id, pruned=tuple(subtree), by="user")
    ]
    for gid in list(state.pending_gates):
        if state.gates[gid].branch_id in subtree:
            events.append(
                ev.GateResolved(gate_id=gid, decision="veto", by="user", note="branch pruned")
            )
    return events


def pruned_subtree(state: RunState, branch_id: str) -> list[str]:
    """The branch and its sub-branches that are still open (what a prune closes)."""
    return [x for x in state.subtree_branches(branch_id) if not state.branches[x].closed]


def hint_vocabulary(state: RunState) -> hints.HintVocabulary:
    return hints.op_vocabulary(state.op, state.op_kind)


def hint_event(state: RunState, text: str, branch_id: str | None) -> ev.Event:
    """The edit, unless a line is not understood with the op's vocabulary (then nothing
    is recorded: such a line has no effect anywhere) or the text is what it was."""
    if not isinstance(text, str):
        raise ValueError("hints must be text")
    before = state.hints if branch_id is None else branch_of(state, branch_id).hints
    why = hints.refusal(text, hint_vocabulary(state))
    if why is not None:
        raise ValueError(f"hints not applied: {why}")
    if text == before:
        raise ValueError("the hints are unchanged")
    return ev.HintEdited(text=text, branch_id=branch_id, by="user")


def approve_event(state: RunState, gate_id: str) -> ev.Event:
    pending_gate(state, gate_id)
    return ev.GateResolved(gate_id=gate_id, decision="approve", by="user")


def veto_event(state: RunState, gate_id: str, note: str) -> ev.Event:
    pending_gate(state, gate_id)
    return ev.GateResolved(gate_id=gate_id, decision="veto", by="user", note=one_line(note))


def pause_event(state: RunState, branch_id: str | None) -> ev.Event:
    if branch_id is None:
        if state.paused:
            raise ValueError("the run is already paused")
        return ev.RunPaused(by="user")
    b = branch_of(state, branch_id)
    if b.closed:
        raise ValueError(f"branch {branch_id} is {b.status}")
    if b.paused:
        raise ValueError(f"branch {branch_id} is already paused")
    return ev.BranchPaused(branch_id=branch_id, by="user")


def resume_event(state: RunState, branch_id: str | None) -> ev.Event:
    if branch_id is None:
        if not state.paused:
            raise ValueError("the run is not paused")
        return ev.RunResumed(by="user")
    b = branch_of(state, branch_id)
    if not b.paused or b.closed:
        raise ValueError(f"branch {branch_id} is not paused")
    return ev.BranchResumed(branch_id=branch_id, by="user")


def open_branch_event(state: RunState, from_attempt: int, strategy: str | None) -> ev.BranchOpened:
    """A new branch from an attempt; its label is `strategy`, else the attempt's own."""
    if state.stopping:
        raise ValueError("the run is stopping")
    if attempts_left(state) == 0:
        raise ValueError(
            f"no attempt is left of the run's {state.setting('max_attempts')}: "
            "a new branch could never run"
        )
    a = state.attempts.get(from_attempt) if isinstance(from_attempt, int) else None
    if a is None:
        raise ValueError(f"no attempt {from_attempt}")
    label = one_line(strategy, 80) if strategy and strategy.strip() else a.strategy
    bid = state.next_branch_id
    return ev.BranchOpened(branch_id=bid, strategy=label, from_attempt=from_attempt, by="user")


def target_event(state: RunState, target: float | None) -> ev.Event:
    if target is not None and not state.speed_measured:
        raise ValueError("this run measures no speed (no GPU): a target could never be reached")
    if target is not None:
        try:
            target = float(target)
        except (TypeError, ValueError):
            raise ValueError("the target must be a number") from None
        if not target > 0:
            raise ValueError("the target must be a positive speedup")
    return ev.TargetChanged(target=target, by="user")


def stop_rule(reason: str) -> tuple[str, str]:
    """(rule, detail) of a stop command: a named rule, or a user stop with the text."""
    rule = reason if reason in STOP_RULES else ev.RULE_USER_STOP
    detail = "" if reason in STOP_RULES or reason == "user" else one_line(reason)
    return rule, detail


def gates_the_hints_avoid(state: RunState, branch_id: str | None) -> list[ev.Event]:
    """After the hints of `branch_id` (None: the global hints) changed: each pending gate
    of that scope whose move the hints now avoid (its family, a PARAM=VALUE it sets, or a
    value other than one the hints fix), vetoed with that hint line as the note. A
    branch's hints touch only its own gates; a move the hints prefer, or do not name,
    stays for the person."""
    out: list[ev.Event] = []
    vocabulary = hint_vocabulary(state)
    for gid in state.pending_gates:
        g = state.gates[gid]
        a = state.attempts.get(g.attempt)
        if a is None or (branch_id is not None and g.branch_id != branch_id):
            continue
        directives = hints.read_hints(state.hints_for(g.branch_id), vocabulary)
        line = avoided_by(directives, a.family, a.meta)
        if line is not None:
            out.append(ev.GateResolved(gate_id=gid, decision="veto", by="hints", note=line))
    return out


def avoided_by(directives: Directives, family: str | None, meta: Any) -> str | None:
    """The hint line that rules out a move of this family and these parameters, if any."""
    params = meta.get("params") if isinstance(meta, dict) else None
    params = {str(k).upper(): v for k, v in params.items()} if isinstance(params, dict) else {}
    for d in directives.understood:
        if d.verb == AVOID and d.family and family and d.family.lower() == family.lower():
            return d.line
        if d.param is None or d.param.upper() not in params:
            continue
        hit = matches(params[d.param.upper()], d.value or "")
        if (d.verb == AVOID and hit) or (d.verb == FIX and not hit):
            return d.line
    return None


def gates_a_stop_resolves(state: RunState) -> list[ev.Event]:
    """Stopping resolves every pending gate: the move is not verified in this session,
    and not held against its branch either (a resumed run may propose it again)."""
    return [
        ev.GateResolved(gate_id=gid, decision="veto", by=STOPPED_BY, note="run stopped")
        for gid in state.pending_gates
    ]


def set_aside_by_stop(state: RunState, n: int) -> bool:
    """Was attempt n waiting at a gate when the run was stopped (the stop resolved it;
    a resume asks again)?"""
    a = state.attempts[n]
    g = state.gates.get(a.gate_id) if a.gate_id is not None else None
    return a.status == AttemptStatus.VETOED and g is not None and g.by == STOPPED_BY


DEPLOY_STATUSES = ("match", "mismatch", "not-used", "error")  # deploy/result.py's


def deploy_event(state: RunState, fields: Any) -> ev.DeployChecked:
    """A deploy's result, recorded beside the run (`kernelladder deploy` sends it to a live
    run's engine): {"attempt", "op", "model", "status", "summary", "result"}."""
    if not isinstance(fields, dict) or not isinstance(fields.get("result"), dict):
        raise ValueError("a deploy is recorded as {attempt, op, model, status, summary, result}")
    attempt = fields.get("attempt")
    if attempt is not None and (not isinstance(attempt, int) or attempt not in state.attempts):
        raise ValueError(f"no attempt #{attempt} in this run")
    status = fields.get("status")
    if status not in DEPLOY_STATUSES:
        raise ValueError(
            f"a deploy's status is one of {', '.join(DEPLOY_STATUSES)}, not {status!r}"
        )
    return ev.DeployChecked(
        attempt=attempt,
        op=str(fields.get("op") or ""),
        model=str(fields.get("model") or ""),
        status=status,
        summary=one_line(str(fields.get("summary") or "")),
        result=dict(fields["result"]),
    )
