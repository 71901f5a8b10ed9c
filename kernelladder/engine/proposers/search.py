"""`search`: the built-in proposer. No key, no network: a deterministic, feedback-driven
local search over the parameterized kernel templates of the five built-in ops.

Per branch it remembers every grid point it proposed and what the verifier said about
it, and no point is proposed twice in a run, on any branch. The next proposal is the
first point untried in the run nearest (in grid steps) to the branch's best verified
point: single-parameter moves first (the last improving move repeated first, the
parameters the feedback points at next), then pairs, then farther rings. When a family's grid is used up it moves to
the next family open to the branch, and when none is left it raises ProposerExhausted.
A branch that changes to a family another branch has walked enters it at the run's best
point of that family, and its parent is then that attempt (the source is derived from
it). On the CPU there are no speed numbers: the base stays the first verified point of
the branch's line and the rings around it are walked in a fixed order.

The branch works in the family of its line as the engine's fold says (ctx.line_family),
and changes only to a family open to it: not one another live branch works in or waits
at a gate to take, not one it left (ctx.closed_families; engine/run/branch_line.py), unless
the person prefers it. Its undo class rates a move against the attempt it is made from;
a change of family is rated high by the engine (engine/run/gating.py), with the why the
search gives in meta["line_why"].

Steering it obeys (read from the context each time, so a resume keeps it): a family the
person vetoed on the branch is never proposed there again, nor a vetoed step; the hint
directives (engine/run/directives.py) prefer or avoid families and fix, avoid or try
parameter values. A branch that stagnates for half its stagnation limit is offered a
change of family (a high undo-cost move a person weighs at a gate) before it runs out;
on the CPU, where only a line's first passing kernel is a gain, that is half that many
attempts after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelladder.engine.proposers.search_judging import (
    best_trial,
    held_back_by,
    low_occupancy,
    resource_trouble,
)
from kernelladder.engine.proposers.search_memory import (
    PASS,
    VETOED,
    BranchMemory,
    RunMemory,
    Trial,
    ingest,
)
from kernelladder.engine.proposers.search_moves import ordered_moves, rings
from kernelladder.engine.proposers.search_steering import Steering, steering
from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerError,
    ProposerExhausted,
)
from kernelladder.engine.run.directives import matches
from kernelladder.ops.family import Family, Param, config_key
from kernelladder.ops.registry import catalog

NAME = "search"
KERNELBENCH_MESSAGE = (
    "the search proposer supports the built-in ops (softmax, rmsnorm, attention, "
    "int8_matmul, kv_quant); use --proposer api or code for KernelBench problems"
)
_SUFFIX = re.compile(r"^(.*?)(?:#(\d+))?$")


@dataclass(frozen=True)
class Step:
    """A chosen grid point and how it was reached."""

    family: Family
    params: dict[str, Any]
    base: Trial | None
    moved: tuple[tuple[str, int], ...]
    switched_from: str | None = None  # a family change
    why: str = ""  # why a family change was offered (stagnation)


class SearchProposer(ProposerBase):
    name = NAME

    def __init__(
        self,
        *,
        cross_family: bool = True,
        families: Mapping[str, Sequence[Family]] | None = None,
        **_: Any,
    ):
        self._families = {k: tuple(v) for k, v in (families or catalog()).items()}
        self._cross_family = cross_family
        self._run = RunMemory()

    # --- protocol -------------------------------------------------------------------
    def resumed(self, op: dict[str, Any], k: int, proposed: list[tuple[str, str]]) -> None:
        """What the run proposed before a resume: never proposed again, also before the
        branches that proposed it have read their histories back."""
        self._run.resumed_hashes = frozenset(h for _, h in proposed if h)

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        families = self._op_families(op)
        labels = [f.name for f in families]
        out: list[str] = []
        for i in range(max(0, k)):
            round_, index = divmod(i, len(labels))
            out.append(labels[index] if round_ == 0 else f"{labels[index]}#{round_ + 1}")
        return out

    async def propose(self, ctx: ProposalContext) -> Proposal:
        families = self._op_families(ctx.op)
        by_name = {f.name: f for f in families}
        memory = self._run.branches.setdefault(ctx.branch_id, BranchMemory())
        parent = ingest(memory, ctx, by_name)
        memory.low_occupancy = low_occupancy(getattr(ctx, "profile", None))
        label_family, rotation = _resolve_label(ctx.strategy, by_name)
        steer = steering(ctx, families)
        if ctx.line_family in by_name:
            memory.family = ctx.line_family  # the engine's fold says which line it is on
        if memory.family is None:
            memory.family = label_family or (parent.family if parent else None) or families[0].name
        memory.family = _settled_family(memory, families, steer)
        dims = _suite_dims(ctx.op, ctx.device)
        step = None
        if memory.family is not None:
            step = _next_step(
                memory, self._run, by_name, families, dims, rotation, ctx, self._cross_family,
                steer,
            )  # fmt: skip
        if step is None:
            raise ProposerExhausted(
                f"search: every {ctx.op.get('name')} grid point in reach was tried on "
                f"branch {ctx.branch_id}"
            )
        return _proposal(memory, step, parent, ctx)

    # --- helpers --------------------------------------------------------------------
    def _op_families(self, op: Mapping[str, Any]) -> tuple[Family, ...]:
        if op.get("kind") == "kernelbench":
            raise ProposerError(KERNELBENCH_MESSAGE, fatal=True)
        families = self._families.get(str(op.get("name")))
        if not families:
            raise ProposerError(
                f"the search proposer has no templates for op {op.get('name')!r}; "
                "use --proposer api or code",
                fatal=True,
            )
        return families


# --- reading the context -------------------------------------------------------------------


def _resolve_label(strategy: str, by_name: Mapping[str, Family]) -> tuple[str | None, int]:
    """("multi-row#2") -> ("multi-row", 1): the family and how far to rotate its parameters."""
    m = _SUFFIX.match(strategy.strip())
    base = m.group(1) if m else strategy
    copy = int(m.group(2)) if m and m.group(2) else 1
    return (base if base in by_name else None), copy - 1


def _suite_dims(op: Mapping[str, Any], device: str) -> list[Mapping[str, int]]:
    shapes = op.get("gpu_shapes" if str(device).startswith("cuda") else "cpu_shapes") or []
    return [s.get("dims") or {} for s in shapes if isinstance(s, Mapping)]


# --- choosing the next point -------------------------------------------------------------------


def _untried(run: RunMemory, op: str, family: Family, point: Mapping[str, Any]) -> bool:
    """A valid point no branch of the run has proposed."""
    return family.valid(point) and not run.tried(op, family, point)


def _settled_family(
    memory: BranchMemory, families: Sequence[Family], steer: Steering
) -> str | None:
    """The branch's family, moved off one the person closed (vetoed here or avoided): to
    the family of its latest trial that was not vetoed (and is not another branch's or
    one it left), else a preferred one, else the first open one; None when every family
    is closed."""
    if memory.family is not None and memory.family not in steer.closed:
        return memory.family
    open_names = [f.name for f in families if f.name not in steer.closed]
    free = [n for n in open_names if n not in steer.taken]
    for trial in sorted(memory.trials.values(), key=lambda t: -t.order):
        if trial.status != VETOED and trial.family in free:
            return trial.family
    if steer.preferred:
        return steer.preferred[0]
    return (free or open_names or [None])[0]


def _family_order(
    current: str, families: Sequence[Family], steer: Steering, cross_family: bool
) -> list[str]:
    """Families in the order the next step is looked for: a preferred family before the
    branch's own (a move there is a family change), others only when the own one is used
    up; a stagnated branch looks at every other family first. A family another live
    branch's line holds, or one this branch left, is looked at only when preferred."""
    if not cross_family:
        return [current]
    open_names = [f.name for f in families if f.name not in steer.closed]
    others = [n for n in open_names if n != current]
    preferred = [n for n in steer.preferred if n in others]
    rest = [n for n in others if n not in preferred and n not in steer.taken]
    if steer.stagnated is not None:
        return preferred + rest + [current]
    if current in steer.preferred:
        return [current] + preferred + rest
    return preferred + [current] + rest


def _next_step(
    memory: BranchMemory,
    run: RunMemory,
    by_name: Mapping[str, Family],
    families: Sequence[Family],
    dims: list[Mapping[str, int]],
    rotation: int,
    ctx: ProposalContext,
    cross_family: bool,
    steer: Steering,
) -> Step | None:
    op = str(ctx.op.get("name"))
    current = memory.family
    assert current is not None
    for name in _family_order(current, families, steer, cross_family):
        family = by_name[name]
        step = _step_in_family(
            memory, run, family, dims, rotation if name == current else 0, op, steer
        )
        if step is None:
            continue
        if name != current and not any(t.family == current for t in memory.trials.values()):
            memory.family = name  # nothing was tried in the label's family: no change
        elif name != current:
            why = ""
            if steer.stagnated is not None:
                why = (
                    f"the branch went {steer.stagnated} attempts without a gain"
                    if steer.measured
                    else f"{steer.stagnated} attempts in this family; speed is not "
                    "measured here, so another family is offered"
                )
            elif name in steer.preferred:
                why = f"the hints prefer {name}"
            else:
                why = f"every point of {current} in reach was tried"
            step = Step(
                step.family, step.params, step.base, step.moved, switched_from=current, why=why
            )
            memory.family = name
        return step
    return None


def _value_of(param: Param, text: str) -> tuple[bool, Any]:
    for v in param.values:
        if matches(v, text):
            return True, v
    return False, None


def _constrained(
    family: Family, point: Mapping[str, Any], steer: Steering
) -> dict[str, Any] | None:
    """The point with the fixed values set; None when it holds an avoided value."""
    out = dict(point)
    params = {p.name: p for p in family.params}
    for name, text in steer.fixed.items():
        if name in params:
            found, value = _value_of(params[name], text)
            if found:
                out[name] = value
    for name, text in steer.avoided_values:
        if name in out and matches(out[name], text):
            return None
    return out


def _start_point(family: Family, steer: Steering) -> dict[str, Any]:
    """The family's start, with fixed values set and avoided values moved to the nearest
    allowed one."""
    point = {p.name: family.start[p.name] for p in family.params}
    point = _constrained(family, point, Steering(fixed=steer.fixed)) or point
    for p in family.params:
        if not any(
            name == p.name and matches(point[p.name], t) for name, t in steer.avoided_values
        ):
            continue
        here = p.values.index(point[p.name]) if point[p.name] in p.values else 0
        allowed = [
            v
            for v in p.values
            if not any(name == p.name and matches(v, t) for name, t in steer.avoided_values)
        ]
        if allowed:
            point[p.name] = min(allowed, key=lambda v: abs(p.values.index(v) - here))
    return point


def _tried_first(
    memory: BranchMemory, run: RunMemory, family: Family, base: Trial, steer: Steering, op: str
) -> Step | None:
    """A `try PARAM=VALUE` directive's point from the base, while it is untried."""
    params = {p.name: p for p in family.params}
    for name, text in steer.tries:
        p = params.get(name)
        if p is None:
            continue
        found, value = _value_of(p, text)
        if not found or base.params.get(name) == value:
            continue
        point = _constrained(family, {**base.params, name: value}, steer)
        if point is None or not _untried(run, op, family, point):
            continue
        if _describe(base.params, point) in memory.dead_moves:
            continue
        old = base.params.get(name)
        way = +1
        if old in p.values and p.values.index(value) < p.values.index(old):
            way = -1
        return Step(family, point, base, ((name, way),))
    return None


def _step_in_family(
    memory: BranchMemory,
    run: RunMemory,
    family: Family,
    dims: list[Mapping[str, int]],
    rotation: int,
    op: str,
    steer: Steering,
) -> Step | None:
    trials = [t for t in memory.trials.values() if t.family == family.name]
    start = _start_point(family, steer)
    if (
        _constrained(family, start, steer) is not None
        and _untried(run, op, family, start)
        and not any(t.status == PASS for t in trials)
    ):
        return Step(family, start, None, ())
    base = best_trial(trials)
    if base is None:
        # nothing in this family verified on this branch: enter it at the run's best point
        # of it (another branch's), else search around its start (or the latest try)
        elsewhere = run.family_trials(family.name, but=memory)
        start_key = config_key(op, family.name, start)
        base = (
            best_trial(elsewhere)
            or memory.trials.get(start_key)
            or (trials[-1] if trials else None)
            or next((t for t in elsewhere if t.key == start_key), None)
            or (elsewhere[-1] if elsewhere else None)
        )
        if base is None:
            return None
    tried = _tried_first(memory, run, family, base, steer, op)
    if tried is not None:
        return tried
    relevant = [p for p in family.params if p.matters(dims)]
    latest = max(trials, key=lambda t: t.order) if trials else None
    moves = ordered_moves(
        family, relevant, base, rotation, held_back_by(base),
        resource_trouble(latest) or memory.low_occupancy,
    )  # fmt: skip
    for ring_point, moved in rings(family, base.params, moves, relevant):
        point = _constrained(family, ring_point, steer)
        if point is None or not _untried(run, op, family, point):
            continue
        if _describe(base.params, point) in memory.dead_moves:
            continue
        return Step(family, point, base, moved)
    return None


# --- the proposal ------------------------------------------------------------------------------


def _value(v: Any) -> str:
    return '""' if v == "" else str(v)


def _describe(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The move line: "ROWS 1->4, EPT 16->8"."""
    return ", ".join(
        f"{name} {_value(old.get(name))}->{_value(value)}"
        for name, value in new.items()
        if old.get(name) != value
    )


def _made_from(memory: BranchMemory, step: Step, ctx: ProposalContext) -> int | None:
    """The attempt the proposal is made from: for a family switch, the best attempt of the
    family it leaves (its move reads "family A -> B"; also when it returns to a point of B
    tried before; the latest of that family when none passed); else a step's base trial;
    else (a rewrite into the branch's family) the parent it was shown. A switch that
    enters the family at another branch's point is made from that point's attempt: its
    source is that point's with one move."""
    if step.switched_from is not None and not _entered_elsewhere(memory, step):
        left = [
            t
            for t in memory.trials.values()
            if t.family == step.switched_from and t.attempt is not None
        ]
        best = best_trial(left) or max(left, key=lambda t: t.order, default=None)
        if best is not None:
            return best.attempt
    if step.base is not None:
        return step.base.attempt
    return ctx.parent_attempt


def _entered_elsewhere(memory: BranchMemory, step: Step) -> bool:
    """Is the step made from another branch's trial (its base is not this branch's)?"""
    return step.base is not None and memory.trials.get(step.base.key) is not step.base


def _numbered(memory: BranchMemory, step: Step) -> Step:
    """The step as proposed: one made from another branch's point whose attempt number
    this proposer has not read yet (that branch has not proposed since) is a rewrite into
    the family at its point, made from the parent it was shown, not a move from it."""
    if step.base is None or step.base.attempt is not None:
        return step
    if not _entered_elsewhere(memory, step):
        return step
    return Step(step.family, step.params, None, (), step.switched_from, step.why)


def _proposal(
    memory: BranchMemory, step: Step, parent: Trial | None, ctx: ProposalContext
) -> Proposal:
    step = _numbered(memory, step)
    family = step.family
    op = str(ctx.op.get("name"))
    key = config_key(op, family.name, step.params)
    base = step.base
    # the class of the move against the attempt it is made from; a change of family is
    # the engine's to rate (gating.py: against the parent, and the branch's line)
    if step.switched_from is not None and _entered_elsewhere(memory, step):
        # the family's start was verified on another branch: go on from its best point
        # (numbered: _numbered made a point not numbered yet a rewrite)
        assert base is not None
        move = f"family {step.switched_from} -> {family.name} from #{base.attempt}: " + (
            _describe(base.params, step.params)
        )
        undo, reason = _step_class(family, step, base)
    elif step.switched_from is not None or (
        base is None and parent is not None and parent.family != family.name
    ):
        left = step.switched_from or (parent.family if parent is not None else "")
        move = f"family {left} -> {family.name}: {family.summary}"
        undo, reason = "medium", f"rewrite into the {family.name} family"
    elif base is None:
        move = f"rewrite as {family.name}: {family.summary}"
        undo = "medium"
        reason = f"structural rewrite of the parent into the {family.name} family of this branch"
    else:
        move = _describe(base.params, step.params)
        if base.attempt is not None and base.attempt != ctx.parent_attempt:
            move += f" (from #{base.attempt})"
        undo, reason = _step_class(family, step, base)
    memory.add(
        Trial(
            key,
            family.name,
            dict(step.params),
            memory.next_order(),
            base_key=base.key if base else None,
            moved=step.moved,
            move=move,
        )
    )
    made_from = _made_from(memory, step, ctx)
    return Proposal(
        source=family.render(step.params),
        strategy=ctx.strategy,
        move=move,
        undo_cost=undo,
        undo_reason=reason,
        meta={
            "family": family.name,
            "params": dict(step.params),
            "key": key,
            "op": op,
            "base_attempt": made_from,
            "from_family": step.switched_from,
            **({"line_why": step.why} if step.switched_from and step.why else {}),
        },
        base_attempt=made_from,
    )


def _step_class(family: Family, step: Step, base: Trial) -> tuple[str, str]:
    """(undo cost, reason) of grid steps from a base trial."""
    structural = [name for name, _ in step.moved if family.param(name).structural]
    if base.status != PASS:
        return "medium", f"{family.name}: a change of an attempt that did not pass ({base.status})"
    if structural:
        return "medium", f"structural rewrite within {family.name}: {', '.join(structural)}"
    where = f"#{base.attempt}" if base.attempt is not None else "the branch's best"
    return "low", f"parameter change of verified attempt {where} ({family.name})"
