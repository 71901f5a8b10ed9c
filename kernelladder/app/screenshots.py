"""Screenshots of the app for the docs, saved by Textual as SVG from a saved run.

    python -m kernelladder.app.screenshots RUN_DIR OUT_DIR [--theme NAME]

Writes main.svg (the main screen at the run's end), verdict.svg, source.svg, diff.svg,
gate.svg (a gate prompt, when the run raised one), profile.svg (the Profile tab, when
the run took Nsight Compute profiles), hints.svg (the hints editor),
help.svg (the key map). Replay mode, so the clocks are the log's own: the same run
gives the same pictures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.modals.gate_prompt import GatePrompt
from kernelladder.app.modals.hints_editor import HintsEditor
from kernelladder.app.replay import load_events
from kernelladder.app.widgets.strategy_tree import StrategyTree
from kernelladder.engine import events as ev

SIZE = (160, 48)


async def settle(app: KernelLadderApp, pilot) -> None:
    """Wait until the screen is complete (the footer fills itself a frame late)."""
    for _ in range(100):
        await pilot.pause(0.02)
        footer = app.screen.query("Footer")
        if not footer or footer.first().children:
            break
    await pilot.pause(0.05)


def gate_position(events: list[ev.Event]) -> int | None:
    """Just after the first GateRaised: where a gate is pending in a replay."""
    for i, e in enumerate(events):
        if isinstance(e, ev.GateRaised):
            return i + 1
    return None


async def take(run_dir: Path, out: Path, theme: str | None = None) -> list[Path]:
    events = load_events(run_dir)
    app = KernelLadderApp(events=events, run_dir=run_dir, frozen=True, at_end=True, theme=theme)
    saved: list[Path] = []

    def shot(name: str) -> None:
        app.save_screenshot(filename=f"{name}.svg", path=str(out))
        saved.append(out / f"{name}.svg")

    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        shot("main")
        for key, name in (("2", "verdict"), ("3", "source"), ("4", "diff")):
            await pilot.press(key)
            await settle(app, pilot)
            shot(name)
        profiled = [e.attempt for e in events if isinstance(e, ev.ProfileReady)]
        if profiled:  # the Profile tab of the best attempt that has one
            best = app.main.view.best_attempt
            app.main.query_one(StrategyTree).select_attempt(
                best if best in profiled else profiled[-1]
            )
            await pilot.press("5")
            await settle(app, pilot)
            shot("profile")
        await pilot.press("1")
        await pilot.press("question_mark")
        await settle(app, pilot)
        shot("help")
        await pilot.press("escape")
        view = app.main.view
        hints = "\n".join(["prefer two-pass", "fix EPT=8", view.hints or "keep rows short"])
        app.push_screen(
            HintsEditor("global", hints, op=view.op, op_kind=view.op_kind, proposer=view.proposer)
        )
        await settle(app, pilot)
        shot("hints")
        await pilot.press("escape")
        at = gate_position(events)
        if at is not None:
            app.replay_seek(at)
            gate = app.main.view.gates[0]
            app.push_screen(GatePrompt(gate, now=lambda: gate.raised_ts))
            await settle(app, pilot)
            shot("gate")
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--theme", default=None)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(take(args.run_dir, args.out_dir, args.theme)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
