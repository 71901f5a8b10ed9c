"""Exit rules: deterministic counters over the folded run state; no model call, no I/O.

What counts as a gain (and so resets stagnation) is gains.py's, shared with the fold.
The target (--target) is on vs best; with --target-over reference, on the speedup over
the reference (older runs, which had no vs best, keep that meaning on resume).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelladder.engine.record import standing_rank
from kernelladder.engine.record.events import (
    RULE_ALL_BRANCHES_DONE,
    RULE_BUDGET_TIME,
    RULE_BUDGET_TOKENS,
    RULE_BUDGET_USD,
    RULE_MAX_ATTEMPTS,
    RULE_REPEATED_FAILURE,
    RULE_STAGNATION,
    RULE_TARGET,
)
from kernelladder.engine.record.gains import (  # noqa: F401 (importable from here too)
    MIN_NOISE,
    failure_signature,
    is_gain,
    normalize_error,
)
from kernelladder.engine.run.branch_line import spent_detail

if TYPE_CHECKING:
    from kernelladder.engine.record.state import BranchState, RunState

REPEATED_FAILURE_LIMIT = 3


def target_over(state: RunState) -> str:
    """What the target is a speedup over: "best" (vs best), or "reference"; a log whose
    settings do not say is older than vs best and meant the reference."""
    over = state.setting("target_over", "reference")
    return over if over in standing_rank.TARGET_OVER else "reference"


def target_hit(state: RunState, attempt: int | None) -> str | None:
    """The detail of a reached target for this attempt (a branch's or the run's best)."""
    target = state.target
    a = state.attempts.get(attempt) if attempt is not None else None
    if not state.speed_measured or target is None or a is None:
        return None
    merit = standing_rank.merit_of(a)
    over = target_over(state)
    figure = standing_rank.target_figure(merit, over)
    if figure is None or figure < target:
        return None
    return f"{standing_rank.target_label(merit, over)} {figure:.3g}x >= target {target:g}x"


def branch_exit(state: RunState, branch: BranchState) -> tuple[str, str] | None:
    """The rule that ends this branch now, with a one-line detail; None to go on."""
    hit = target_hit(state, branch.best_attempt)
    if hit is not None:
        return RULE_TARGET, hit
    limit = state.setting("stagnation")
    if limit and branch.stagnation >= limit:
        if state.speed_measured:
            spent = f"{branch.stagnation} attempts without a gain beyond noise"
        else:  # a line gains once there, by its first passing kernel (state.py)
            spent = (
                f"{branch.stagnation} attempts after its line's first passing kernel "
                "(no speed is measured to judge one faster)"
            )
        where = spent_detail(state, branch.id)
        return RULE_STAGNATION, f"{spent} {where}" if where else spent
    for signature, count in branch.failure_counts.items():
        if count >= REPEATED_FAILURE_LIMIT:
            return RULE_REPEATED_FAILURE, f"{count}x {signature}"
    return None


def run_exit(state: RunState, now: float | None = None) -> tuple[str, str] | None:
    """The rule that ends the whole run now (the engine also ends it when a person
    stops it or no branch is left); None to go on. `now` is wall time for the time
    budget (None: judge by the log's own last timestamp)."""
    hit = target_hit(state, state.best_attempt)
    if hit is not None:
        return RULE_TARGET, f"best {hit}"
    budget = state.setting("budget_usd")
    if budget is not None and state.cost_usd >= budget:
        return RULE_BUDGET_USD, f"spent ${state.cost_usd:.2f} of ${budget:.2f}"
    tokens = state.setting("budget_tokens")
    if tokens is not None and state.tokens_in + state.tokens_out >= tokens:
        used = state.tokens_in + state.tokens_out
        return RULE_BUDGET_TOKENS, f"used {used:,} of {tokens:,} tokens"
    limit = state.setting("time_limit_s")
    if limit is not None and state.elapsed_at(now) >= limit:
        return RULE_BUDGET_TIME, f"ran {state.elapsed_at(now):.0f}s of {limit:g}s"
    return None


def attempts_left(state: RunState, reserved: int = 0) -> int:
    """Attempt numbers the run may still hand out (max-attempts counts every proposal
    that received a number, whether verified, vetoed or failed)."""
    limit = state.setting("max_attempts")
    if not limit:
        return 1 << 30
    return max(0, limit - state.attempts_used - reserved)


def max_attempts_reached(state: RunState) -> tuple[str, str] | None:
    limit = state.setting("max_attempts")
    if limit and state.attempts_used >= limit:
        return RULE_MAX_ATTEMPTS, f"{state.attempts_used} of {limit} attempts used"
    return None


def all_branches_done(state: RunState) -> tuple[str, str] | None:
    if state.branches and all(b.closed for b in state.branches.values()):
        return RULE_ALL_BRANCHES_DONE, "no branch is left to run"
    return None
