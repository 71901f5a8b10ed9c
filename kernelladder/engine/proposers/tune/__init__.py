"""`tune`: a joint search over the launch parameters of any Triton kernel. No key, no
network.

It reads the source (knobs.py: knobs found by role, never by name), builds the space of
their values under the kernel's and the GPU's constraints (space.py), and proposes one
config at a time, each a move of one or several knobs from a config already judged.
Every verdict of the run (every branch) feeds one model: per knob value, the mean log
speedup of the configs judged with it against the mean of all; a config's score is the
sum over its values. Branches look in different regions:

    tune:pattern  around the run's best config: every one-knob move, then two-knob moves
                  (coupled pairs first: a tile with num_warps, the K tile with
                  num_stages), then three-knob moves; the best score first in each ring
    tune:seeds    the user's start and Triton's usual configs for the kernel's kind, then
                  moves around the run's second best (a region the pattern branch leaves)
    tune:explore  anywhere in the space: the model's best untried configs, the farthest
                  from what was tried first among near ties

A verdict whose timing stopped early (coarse times, not faster than the branch's head)
is a loser: it feeds the model but is never a base. A config that failed to compile for
resources rules out its region. A branch is done only when every feasible config of the
space was proposed (each branch falls back to the rest of the space), and it says how
much of the space the run covered. The profile (when taken) steers the first moves:
memory-bound -> larger tiles and more stages first; low occupancy -> fewer warps and
stages first.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelladder.engine.proposers.tune.knobs import (
    STAGES,
    TILE,
    VALUE,
    WARPS,
    Found,
    apply_edits,
    find,
    with_config,
)
from kernelladder.engine.proposers.tune.space import (
    ENUMERATE_MAX,
    Config,
    Space,
    distance,
    neighbours,
    resource_failure,
    spent_text,
)
from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerExhausted,
)

__all__ = ["NAME", "STRATEGIES", "TuneProposer", "apply_edits", "find", "profile_order"]

NAME = "tune"
STRATEGIES = ("pattern", "seeds", "explore")
UP, DOWN = 1, -1
GROUP_OF_ROLE = {TILE: "blocks", VALUE: "blocks", WARPS: "warps", STAGES: "stages"}
PROFILE_WEIGHT = 0.01  # a move's agreement with the profile, in log-speedup units
COUPLED_BONUS = 0.004  # two knobs that want to move together, moved together
NOVELTY_WEIGHT = 0.05  # per value never judged yet (measured on toy landscapes: 0.002 to 0.1)
FAR_WEIGHT = (
    0.01  # explore: per step from the nearest config tried (a tie-breaker; measured best small)
)
EXPLORE_SAMPLE = 2000
EXPLORE_TOP = 128  # of the model's best, the farthest from what was tried go first


def profile_order(group: str, profile: Mapping[str, Any] | None) -> tuple[int, int]:
    """Directions to try first for a group ("blocks", "warps", "stages"), from a profile
    summary: a memory-bound kernel wants larger tiles and more stages (fewer programs,
    wider accesses, deeper prefetch); low achieved occupancy wants fewer warps or stages
    (fewer registers, less shared memory)."""
    if not profile:
        return (UP, DOWN)
    dram = profile.get("dram_pct") or 0.0
    sm = profile.get("sm_pct") or 0.0
    occupancy = profile.get("achieved_occupancy_pct")
    if group in ("warps", "stages") and occupancy is not None and occupancy < 30:
        return (DOWN, UP)
    if group == "blocks" and dram < sm:
        return (DOWN, UP)
    return (UP, DOWN)


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass
class Judged:
    """What the run knows of one config."""

    attempt: int | None
    source: str
    status: str  # "pass" | "fail" | "pending"
    speedup: float | None = None
    early: bool = False  # coarse times: not faster than the branch's head


@dataclass
class _Run:
    """The run-wide memory, shared by every branch."""

    space: Space | None = None
    judged: dict[Config, Judged] = field(default_factory=dict)
    proposed: set[Config] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)
    feasible: dict[Config, bool] = field(default_factory=dict)
    feasible_count: tuple[tuple[int, int], int] | None = None  # (key, count)
    allowed: dict[str, dict[str, float]] = field(default_factory=dict)
    parsed: dict[str, Found] = field(default_factory=dict)
    calls: int = 0


class TuneProposer(ProposerBase):
    name = NAME

    def __init__(self, **_: Any):
        self._run = _Run()

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        out = []
        for i in range(max(0, k)):
            round_, index = divmod(i, len(STRATEGIES))
            label = f"tune:{STRATEGIES[index]}"
            out.append(label if round_ == 0 else f"{label}#{round_ + 1}")
        return out

    def left_over(self) -> str | None:
        run = self._run
        if run.space is None:
            return None
        feasible = self._feasible_count()
        if feasible is not None and self._covered() >= feasible:
            return None
        return "tune: " + self._coverage_text()

    # --- reading what the run knows -----------------------------------------------------
    def _found(self, source: str) -> Found:
        d = _digest(source)
        if d not in self._run.parsed:
            self._run.parsed[d] = find(source)
        return self._run.parsed[d]

    def _config(self, source: str) -> Config | None:
        space = self._run.space
        try:
            found = self._found(source)
        except Exception:  # noqa: BLE001 - a source another proposer wrote may not parse
            return None
        return space.config_of(found) if space is not None else None

    def _learn(
        self, attempt: int | None, source: str, verdict: str | None, speedup: Any, text: str
    ) -> None:
        run = self._run
        config = self._config(source)
        run.digests.add(_digest(source))
        if config is None:
            return
        run.proposed.add(config)
        status = verdict if verdict in ("pass", "fail") else "pending"
        early = "stopped early" in text
        fast = float(speedup) if isinstance(speedup, int | float) and speedup > 0 else None
        old = run.judged.get(config)
        new = Judged(attempt, source, status, fast, early)
        replaces = (
            old is None or old.status == "pending" or (old.status != "pass" and status == "pass")
        )
        faster = status == "pass" and fast is not None and not early
        if replaces or (faster and old is not None and (old.speedup or 0) < (fast or 0)):
            run.judged[config] = new
        if status == "fail" and resource_failure(text) and run.space is not None:
            run.space.mark_infeasible(config)
            run.feasible.clear()
            run.feasible_count = None

    def _ingest(self, ctx: ProposalContext) -> None:
        pv = ctx.parent_verdict or {}
        pv_text = " ".join(
            str(x)
            for x in (
                pv.get("summary"),
                pv.get("early_stop") and "stopped early",
                ctx.feedback.get("saw"),
            )
            if x
        )
        self._learn(
            ctx.parent_attempt, ctx.parent_source, pv.get("verdict"), pv.get("speedup"), pv_text
        )
        for h in ctx.history:
            if not isinstance(h.get("source"), str):
                continue
            text = f"{h.get('gate') or ''} {h.get('summary') or ''}"
            if h.get("early_stop"):
                text += " stopped early"
            self._learn(h.get("attempt"), h["source"], h.get("verdict"), h.get("speedup"), text)

    # --- feasibility and coverage -------------------------------------------------------
    def _ok(self, config: Config) -> bool:
        run = self._run
        space = run.space
        assert space is not None
        if config not in run.feasible:
            run.feasible[config] = not space.why_not(config, run.allowed)
        return run.feasible[config]

    def _feasible_count(self) -> int | None:
        space = self._run.space
        assert space is not None
        if space.size > ENUMERATE_MAX:
            return None
        key = (len(space.infeasible), space.smem_limit)
        if self._run.feasible_count is None or self._run.feasible_count[0] != key:
            count = sum(1 for c in space.all() if self._ok(c))
            self._run.feasible_count = (key, count)
        return self._run.feasible_count[1]

    def _covered(self) -> int:
        """Feasible configs proposed (the start among them); one ruled out after it was
        proposed (its region failed to compile) no longer counts."""
        return sum(1 for c in self._run.proposed if self._ok(c))

    def _coverage_text(self) -> str:
        space = self._run.space
        assert space is not None
        feasible = self._feasible_count()
        proposed = len(self._run.proposed)
        if feasible is None:
            return (
                f"{proposed} configs proposed of a space of {space.size} (too large to enumerate)"
            )
        text = spent_text(self._covered(), feasible, space.size)
        ruled_out = proposed - self._covered()
        return text + (f"; {ruled_out} more proposed, then ruled out" if ruled_out else "")

    # --- the model ------------------------------------------------------------------------
    def _effects(self) -> list[dict[int, float]]:
        """Per knob, per value: shrunk mean of (log speedup - overall mean)."""
        space = self._run.space
        assert space is not None
        measured = [
            (c, math.log(j.speedup))
            for c, j in self._run.judged.items()
            if j.status == "pass" and j.speedup
        ]
        effects: list[dict[int, float]] = [{} for _ in space.knobs]
        if not measured:
            return effects
        mean = sum(s for _, s in measured) / len(measured)
        sums: list[dict[int, list[float]]] = [{} for _ in space.knobs]
        for c, s in measured:
            for i, v in enumerate(c):
                sums[i].setdefault(v, []).append(s - mean)
        for i, per in enumerate(sums):
            for v, diffs in per.items():
                effects[i][v] = sum(diffs) / (len(diffs) + 1)  # one pseudo-count at 0
        # a failed config (not a resource failure) pulls its values down a little
        for c, j in self._run.judged.items():
            if j.status == "fail":
                for i, v in enumerate(c):
                    effects[i][v] = effects[i].get(v, 0.0) - 0.05
        return effects

    def _score(
        self,
        config: Config,
        base: Config,
        effects: list[dict[int, float]],
        profile: Mapping[str, Any] | None,
    ) -> float:
        space = self._run.space
        assert space is not None
        score = 0.0
        moved = []
        for i, (v, b) in enumerate(zip(config, base, strict=True)):
            score += effects[i].get(v, 0.0)
            if v not in effects[i]:
                score += NOVELTY_WEIGHT
            if v != b:
                knob = space.knobs[i]
                direction = UP if v > b else DOWN
                moved.append((knob, direction))
                group = GROUP_OF_ROLE.get(knob.role)
                if group is not None and profile:
                    score += PROFILE_WEIGHT * (
                        1 if profile_order(group, profile)[0] == direction else -1
                    )
        if len(moved) == 2:
            (k1, d1), (k2, d2) = moved
            roles = {k1.dot or k1.role, k2.dot or k2.role}
            coupled = (TILE in roles or "M" in roles or "N" in roles) and WARPS in roles
            coupled = coupled or roles == {"K", STAGES} or roles == {TILE, STAGES}
            score += COUPLED_BONUS if coupled and d1 == d2 else -COUPLED_BONUS / 2
        elif len(moved) > 2:
            score -= COUPLED_BONUS
        return score

    # --- where to look ----------------------------------------------------------------------
    def _ranked(self) -> list[Config]:
        """Judged configs that passed, fastest first; early stops and unmeasured last."""
        passed = [(c, j) for c, j in self._run.judged.items() if j.status == "pass"]
        passed.sort(key=lambda cj: (not cj[1].early, cj[1].speedup or 0.0), reverse=True)
        return [c for c, _ in passed]

    def _around(
        self, base: Config, effects: list[dict[int, float]], profile: Any
    ) -> Iterator[Config]:
        space = self._run.space
        assert space is not None
        # every one-knob move first (as a pattern search does: the moves that say most),
        # then two-knob and three-knob moves; the model orders each ring
        for radius in (1, 2, 3):
            ring = [c for c, _ in neighbours(space, base, radius)]
            yield from sorted(ring, key=lambda c: -self._score(c, base, effects, profile))

    def _explore(self, effects: list[dict[int, float]]) -> Iterator[Config]:
        """Untried configs by the model's score, the farthest from what was tried first
        among near ties (a sample of the space when it is large)."""
        space = self._run.space
        assert space is not None
        if space.size <= EXPLORE_SAMPLE:
            pool = list(space.all())
        else:
            rng = random.Random(self._run.calls)
            pool = [tuple(rng.choice(v) for v in space.values) for _ in range(EXPLORE_SAMPLE)]
        pool = [c for c in set(pool) if c not in self._run.proposed and self._ok(c)]
        start = space.start()
        top = sorted(pool, key=lambda c: -self._score(c, start, effects, None))[:EXPLORE_TOP]
        tried = [space.index(c) for c in self._run.proposed]
        tried = [t for t in tried if t is not None][-64:]

        def far(c: Config) -> int:
            ic = space.index(c)
            if ic is None or not tried:
                return 0
            return min(sum(abs(a - b) for a, b in zip(ic, t, strict=True)) for t in tried)

        def score(c: Config) -> float:
            return self._score(c, start, effects, None) + FAR_WEIGHT * min(far(c), 6)

        yield from sorted(top, key=score, reverse=True)

    def _candidates(self, strategy: str, ctx: ProposalContext) -> Iterator[Config]:
        space = self._run.space
        assert space is not None
        effects = self._effects()
        ranked = [c for c in self._ranked() if not self._run.judged[c].early]
        parent = self._config(ctx.parent_source) or space.start()
        best = ranked[0] if ranked else parent
        if strategy == "seeds":
            yield from space.seeds()
            second = ranked[1] if len(ranked) > 1 else parent
            yield from self._around(second, effects, ctx.profile)
        elif strategy == "explore":
            yield from self._explore(effects)
        yield from self._around(best, effects, ctx.profile)
        for c in ranked[1:8]:  # the next best regions
            yield from self._around(c, effects, ctx.profile)
        yield from self._explore(effects)
        if space.size <= ENUMERATE_MAX:  # the rest of the space, so nothing is left over
            yield from space.all()

    def _base(self, config: Config, ctx: ProposalContext) -> Judged:
        """The judged config nearest to `config` (passing first, the parent on ties; never
        one whose timing stopped early)."""
        space = self._run.space
        assert space is not None
        parent = self._config(ctx.parent_source)
        # an early stop's coarse times only said "a loser": never a base
        options = [(c, j) for c, j in self._run.judged.items() if j.source and not j.early]

        def key(cj: tuple[Config, Judged]) -> tuple[int, int, int]:
            c, j = cj
            return (distance(space, config, c), j.status != "pass", c != parent)

        if not options:
            return Judged(ctx.parent_attempt, ctx.parent_source, "pending")
        return min(options, key=key)[1]

    # --- the proposal -----------------------------------------------------------------------
    async def propose(self, ctx: ProposalContext) -> Proposal:
        run = self._run
        run.calls += 1
        found = self._found(ctx.parent_source)
        if run.space is None or run.space.config_of(found) is None:
            if not found.knobs:
                raise ProposerExhausted(
                    "tune: no launch parameter to tune in the kernel's Triton launches"
                )
            # a parent with other knobs (another proposer's source): a space of its own
            self._run = run = _Run(digests=run.digests, parsed=run.parsed, calls=run.calls)
            run.space = Space.of(found, ctx.hardware)
            run.allowed = run.space.estimates(run.space.start())
            if not run.space.knobs:
                raise ProposerExhausted("tune: no launch parameter with more than one value")
        space = run.space
        if ctx.hardware:
            from kernelladder.engine.proposers.tune.space import smem_limit

            limit = smem_limit(ctx.hardware)
            if limit != space.smem_limit:
                space.smem_limit = limit
                run.feasible.clear()
                run.feasible_count = None
        self._ingest(ctx)
        strategy = ctx.strategy.removeprefix("tune:").split("#")[0]
        for config in self._candidates(strategy, ctx):
            if config in run.proposed or not self._ok(config):
                continue
            base = self._base(config, ctx)
            base_found = self._found(base.source)
            source = with_config(base.source, base_found.knobs, space.as_dict(config))
            digest = _digest(source)
            if digest in run.digests:
                run.proposed.add(config)
                continue
            run.proposed.add(config)
            run.digests.add(digest)
            run.judged.setdefault(config, Judged(None, "", "pending"))
            return self._proposal(ctx, config, base, source, strategy)
        raise ProposerExhausted("tune: the space is spent: " + self._coverage_text())

    def _proposal(
        self, ctx: ProposalContext, config: Config, base: Judged, source: str, strategy: str
    ) -> Proposal:
        space = self._run.space
        assert space is not None
        base_config = self._config(base.source) or space.start()
        changed = [
            (k, old, new)
            for k, old, new in zip(space.knobs, base_config, config, strict=True)
            if old != new
        ]
        move = ", ".join(f"{k.label} {k.show(old)}→{k.show(new)}" for k, old, new in changed)
        if base.attempt is not None and base.attempt != ctx.parent_attempt:
            move += f" (from #{base.attempt})"
        where = f"#{base.attempt}" if base.attempt is not None else "the start"
        feasible = self._feasible_count()
        return Proposal(
            source=source,
            strategy=ctx.strategy,
            move=move,
            undo_cost="low",
            undo_reason=f"launch parameters of {where}, {len(changed)} changed",
            meta={
                # no "family": a tune move changes launch parameters, never the algorithm,
                # so no move of it is a family change, whichever branch it is made from
                "strategy": f"tune:{strategy}",
                "config": space.as_dict(config),
                "changed": {k.label: [old, new] for k, old, new in changed},  # raw values
                "base_attempt": base.attempt,
                "space": {"size": space.size, "feasible": feasible, "covered": self._covered()},
            },
            base_attempt=base.attempt,
        )
