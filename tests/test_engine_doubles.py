"""Test doubles for the engine's two seams, the Runner and the Proposer.

Why doubles: the engine's behaviour (rules, gates, steering, resume, backpressure)
depends on verdicts with measured speedups and on proposals arriving on cue, and this
machine has no GPU (no speed exists here) and no model. The real verifier and the real
`search` proposer are exercised end to end in test_optimize_cli.py; these doubles only
let the engine tests script outcomes exactly and fast. A scripted source carries its
fate in a marker line the ScriptedRunner reads, e.g.

    # outcome: pass 1.4 noise 0.02      -> a passing verdict, speedup 1.4x
    # outcome: fail correctness max error 3.5 at index 17
    # outcome: crash
    # outcome: lost 1 then pass 1.2     -> RunnerLost once, then a pass
    # outcome: hold                      -> waits until the runner's `release` is set
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable
from typing import Any

from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerExhausted,
    RunnerBase,
    RunnerLost,
    VerifyRequest,
)
from kernelladder.verifier.verdict import GATES, Feedback, GateResult, Verdict

_OUTCOME = re.compile(r"#\s*outcome:\s*(.*)")


def verdict_for(source: str, device: str) -> Verdict:
    m = _OUTCOME.search(source)
    spec = (m.group(1) if m else "pass").strip()
    if " then " in spec:
        spec = spec.split(" then ", 1)[1]
    words = spec.split()
    kind = words[0]
    gates: dict[str, GateResult] = {}
    if kind == "pass":
        speed = float(words[1]) if len(words) > 1 and device == "cuda" else None
        noise = float(words[3]) if len(words) > 3 and words[2] == "noise" else 0.01
        for g in GATES:
            gates[g] = GateResult("pass", "ok")
        if speed is None:
            gates["speed"] = GateResult("skipped", "no GPU: speed not measured")
        return Verdict(
            verdict="pass", kind="pass", gate=None, gates=gates, op="scripted", device=device,
            source_hash="", speedup=speed, noise=noise if speed else None,
            floor_fraction=0.5 if speed else None,
            feedback=Feedback(expected="ref", saw="ok", fence="the fence"),
        )  # fmt: skip
    if kind in ("crash", "timeout"):
        gates[kind] = GateResult("fail", f"worker {kind} (pid 4242)")
        return Verdict(
            verdict="fail", kind=kind, gate=kind, gates=gates, op="scripted", device=device,
            source_hash="", feedback=Feedback(expected="returns", saw=kind, fence="the fence"),
        )  # fmt: skip
    gate = words[1] if len(words) > 1 else "correctness"
    detail = " ".join(words[2:]) or "wrong"
    for g in GATES:
        gates[g] = GateResult("pass", "ok")
        if g == gate:
            gates[g] = GateResult("fail", detail)
            break
    return Verdict(
        verdict="fail", kind="fail", gate=gate, gates=gates, op="scripted", device=device,
        source_hash="", feedback=Feedback(expected="1.0", saw=detail, fence="the fence"),
    )  # fmt: skip


class ScriptedRunner(RunnerBase):
    """Runner double: verdicts come from the candidate's `# outcome:` line."""

    name = "scripted"

    def __init__(self, device: str = "cuda", slots: int = 1, delay: float = 0.0) -> None:
        self.device = device
        self._slots = slots
        self.delay = delay
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.lost: dict[str, int] = {}
        self.started = False
        self.closed = False
        self.concurrent = 0
        self.max_concurrent = 0

    @property
    def slots(self) -> int:
        return self._slots

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def describe(self) -> dict[str, Any]:
        gpu = "Scripted GPU" if self.device == "cuda" else None
        return {"device": self.device, "gpu": gpu, "slots": self._slots, "host": "local"}

    async def verify(self, request: VerifyRequest, on_progress=None, on_slot=None) -> Verdict:
        self.calls.append(request.source)
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            m = _OUTCOME.search(request.source)
            spec = m.group(1) if m else "pass"
            lost = re.match(r"lost (\d+) then", spec)
            if lost:
                seen = self.lost.get(request.source, 0)
                if seen < int(lost.group(1)):
                    self.lost[request.source] = seen + 1
                    raise RunnerLost("connection to scripted-box lost")
            if on_progress is not None:
                for gate in ("load", "correctness"):
                    for i in range(10):
                        on_progress(gate, f"{gate} step {i}")
            if spec.strip().startswith("hold"):
                await self.release.wait()
                return verdict_for("# outcome: pass 1.1", request.device)
            if self.delay:
                await asyncio.sleep(self.delay)
            return verdict_for(request.source, request.device)
        finally:
            self.concurrent -= 1


def move(
    outcome: str, name: str | None = None, *, undo: str = "low", meta=None, body: str = ""
) -> Proposal:
    """A scripted proposal whose verdict will be `outcome`."""
    label = name or outcome
    source = (
        f"# {label}\n# outcome: {outcome}\nimport triton\n{body}\ndef kernel(x):\n    return x\n"
    )
    return Proposal(
        source=source, strategy="scripted", move=label, undo_cost=undo,
        undo_reason=f"{undo} move", meta=dict(meta or {}),
    )  # fmt: skip


class ScriptedProposer(ProposerBase):
    """Proposer double: hands out scripted moves per branch (or from a shared list), and
    records every ProposalContext it was given."""

    name = "scripted"

    def __init__(
        self,
        moves: list[Proposal] | dict[str, list[Proposal]] | Callable[[ProposalContext], Proposal],
        *,
        strategies: list[str] | None = None,
        delay: float = 0.0,
    ) -> None:
        self._moves = moves
        self._labels = strategies or ["alpha", "beta", "gamma", "delta"]
        self.delay = delay
        self.contexts: list[ProposalContext] = []
        self._counter = itertools.count(1)
        self.hold = asyncio.Event()
        self.hold.set()
        self.cancelled = 0

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        return self._labels[:k]

    async def propose(self, ctx: ProposalContext) -> Proposal:
        self.contexts.append(ctx)
        try:
            await self.hold.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if callable(self._moves):
            return self._moves(ctx)
        queue = self._moves if isinstance(self._moves, list) else self._moves.get(ctx.branch_id, [])
        if not queue:
            raise ProposerExhausted("script finished")
        p = queue.pop(0)
        if isinstance(p, BaseException):
            raise p
        # unique source per attempt, so "new passing variant" means what it says
        return Proposal(**{**p.__dict__, "source": p.source + f"# n{next(self._counter)}\n"})


def test_scripted_runner_reads_outcomes():
    v = verdict_for("# outcome: fail correctness max error 3.5 at index 17", "cuda")
    assert (v.verdict, v.gate, v.gates["correctness"].detail) == (
        "fail", "correctness", "max error 3.5 at index 17",
    )  # fmt: skip
    assert verdict_for("# outcome: pass 1.4", "cuda").speedup == 1.4
    assert verdict_for("# outcome: pass 1.4", "cpu").speedup is None


# --- helpers shared by the engine tests ------------------------------------------------

SCRIPTED_OP = None  # built lazily so importing this module stays cheap


def scripted_op():
    from kernelladder.engine.engine import OpInfo

    return OpInfo(
        name="scripted",
        kind="builtin",
        wire="scripted",
        description={"name": "scripted", "fence": "the fence", "signature": "kernel(x)"},
        starting_source="# starting candidate\n# outcome: pass 1.0\n",
    )


def make_run(tmp_path, moves, *, runner=None, proposer=None, strategies=None, **options):
    from kernelladder.engine.engine import create_run
    from kernelladder.engine.options import RunOptions

    options.setdefault("branches", 1)
    options.setdefault("gate", "veto")
    options.setdefault("device", "cuda")
    runner = runner or ScriptedRunner(device=options["device"])
    proposer = proposer or ScriptedProposer(moves, strategies=strategies)
    opts = RunOptions(op="scripted", proposer="scripted", run_dir=str(tmp_path / "run"), **options)
    return create_run(opts, runner=runner, proposer=proposer, op=scripted_op()), runner, proposer


async def until(predicate, timeout: float = 10.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def kinds(events) -> list[str]:
    return [e.kind for e in events]
