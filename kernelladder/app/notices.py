"""Which of a batch's events become toasts and how each reads, and the one toast that
names the gates waiting for the person. Pure: the app holds the notes while a dialog is
open and shows them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kernelladder.engine import events as ev

NOTICES_PER_BATCH = 3  # toasts per batch; the rest are counted in one more toast
GATE_NOTE = "gate"  # a held note's severity slot: a gate that waits (merged when shown)

Note = tuple[str, str, str]  # (message, title, severity)


def event_notes(events: Sequence[ev.Event], *, recorded: bool, gates: Iterable[Any]) -> list[Note]:
    """The notes a batch of events gives. `recorded`: a replay's (its notices are the
    run's, said then); `gates`: the gates waiting before the batch, asked again when an
    earlier session's run reopens."""
    notes: list[Note] = []
    # a run that ends on an error repeats that error's Notice as its detail: one toast
    ending = {e.detail for e in events if isinstance(e, ev.RunFinished) and e.detail}
    # an earlier session's end, with the next session in the same batch (an app
    # attached to a resumed run): not news
    last_reopened = max(
        (i for i, e in enumerate(events) if isinstance(e, ev.RunReopened)), default=-1
    )
    for i, e in enumerate(events):
        if isinstance(e, ev.RunFinished) and i < last_reopened:
            continue
        if isinstance(e, ev.Notice) and e.level == "error" and e.message in ending:
            continue
        if isinstance(e, ev.Notice):
            severity = {"warning": "warning", "error": "error"}.get(e.level, "information")
            where = f" ({e.branch_id})" if e.branch_id else ""
            when = " recorded" if recorded else ""  # e.g. workers kept warm, said then
            notes.append((e.message, f"notice{where}{when}", severity))
        elif isinstance(e, ev.ProposalFailed):
            # the engine often says the same in a Notice: show it once
            said = any(isinstance(n, ev.Notice) and e.error in n.message for n in events)
            if not said:
                notes.append((e.error, f"proposer failed on {e.branch_id}", "warning"))
        elif isinstance(e, ev.GateRaised) and e.policy == "ask":
            notes.append((e.move, f"gate {e.gate_id}", GATE_NOTE))
        elif isinstance(e, ev.BranchExhausted):
            notes.append(
                (e.detail or e.rule, f"branch {e.branch_id} stopped: {e.rule}", "information")
            )
        elif isinstance(e, ev.RunReopened):
            # gates an earlier session left pending are asked again now (not those
            # raised anew in this batch: their GateRaised says so)
            raised = {x.gate_id for x in events if isinstance(x, ev.GateRaised)}
            for gate in gates:
                if gate.policy == "ask" and gate.gate_id not in raised:
                    notes.append((gate.move, f"gate {gate.gate_id} still", GATE_NOTE))
        elif isinstance(e, ev.RunFinished):
            severity = "error" if e.reason == ev.RULE_ERROR else "information"
            if e.detail and e.detail != e.reason:
                notes.append((e.detail, f"run finished: {e.reason}", severity))
            else:  # the reason alone: said once, not as title and message both
                notes.append((f"run finished: {e.reason}", "", severity))
    return notes


def gate_announcement(gates: Sequence[tuple[str, str]], *, decides: bool) -> Note:
    """One toast for the waiting gates, each (title "gate G1", move). `decides`: the
    person may decide them here (else, a read-only page or a replay, they are named)."""
    names = ", ".join(title.split()[1] for title, _ in gates)
    if not decides:
        return "; ".join(m for _, m in gates), f"waiting at gate {names}", "information"
    if len(gates) == 1:
        title, move = gates[0]
        return f"{move} — press g to decide", f"{title} waits for you", "warning"
    return (
        "; ".join(move for _, move in gates) + " — press g to decide each",
        f"{len(gates)} gates wait for you: {names}",
        "warning",
    )
