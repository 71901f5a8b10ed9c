"""Makes examples/cpu-rmsnorm-run: a real run on the CPU, driven through the app.

The real engine, the built-in `search` proposer and the real verifier (Triton's CPU
interpreter: no speed is measured), steered the way a person would through the app's
keys: global hints, a branch opened from an attempt (its family change waits at a
gate), and every gate approved. The run directory is then a demo for
`kernelladder-tui --replay` and the test data of the app's snapshot tests.

    python examples/make_cpu_rmsnorm_run.py [RUN_DIR]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

from kernelladder.app.app import KernelLadderApp  # noqa: E402
from kernelladder.app.widgets.strategy_tree import StrategyTree  # noqa: E402
from kernelladder.engine import create_run  # noqa: E402
from kernelladder.engine import RunOptions  # noqa: E402

RUN_DIR = Path("examples/cpu-rmsnorm-run")


async def until(pilot, predicate, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def main(run_dir: Path) -> None:
    options = RunOptions(
        op="rmsnorm", device="cpu", branches=2, max_attempts=12, gate="ask",
        run_dir=str(run_dir),
    )  # fmt: skip
    app = KernelLadderApp(run=create_run(options), frozen=True)
    async with app.run_test(size=(160, 48)) as pilot:
        view = lambda: app.main.view  # noqa: E731
        await until(pilot, lambda: view().attempts_judged >= 1, "a verdict")
        # a directive the op's search reads, and a note in plain words
        await pilot.press("h", *"try ROWS", "equals_sign", "2", "enter")
        await pilot.press(*"fewer rows per program when M is small", "ctrl+s")
        await until(pilot, lambda: bool(view().hints), "the hints")
        tree = app.main.query_one(StrategyTree)
        tree.follow = False
        tree.select_attempt(1)
        await pilot.pause(0.2)
        await pilot.press("o", *"persistent", "enter")
        await until(pilot, lambda: view().gates, "a gate")
        # every change of a branch's line waits at a gate (the new branch's among them):
        # approve each, as a person does: select the gated attempt, press a
        deadline = time.monotonic() + 900
        while not app.run_over and time.monotonic() < deadline:
            if view().gates:
                await pilot.pause(0.5)
                gate = view().gates[0]
                tree.select_attempt(gate.attempt)
                await until(pilot, lambda g=gate: app.main.selected_attempt == g.attempt, "it")
                await pilot.press("a")
                await until(pilot, lambda g=gate: view().gate(g.gate_id) is None, "the decision")
            await pilot.pause(0.1)
        await until(pilot, lambda: app.run_over, "the end of the run", timeout=60)
    print(f"wrote {run_dir}: {app.fold.folded} events, {view().attempts_judged} verdicts")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else RUN_DIR))
