"""The run's notices as toasts: none is drawn over an open dialog (they wait until it
closes), and gates that wait for the person at the same time are one toast.

The run is the real engine with the engine tests' doubles (helpers.py says why): both
branches' first moves are high undo cost, so two gates are raised under --gate ask."""

from __future__ import annotations

from helpers import SIZE, ScriptedProposer, ScriptedRunner, move, scripted_op, until

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.modals.help_screen import HelpScreen
from kernelladder.engine import create_run
from kernelladder.engine.run.options import RunOptions


def two_gates_app(tmp_path) -> tuple[KernelLadderApp, ScriptedProposer]:
    proposer = ScriptedProposer(
        {
            "b1": [move("pass 1.4", "two-pass", undo="high")],
            "b2": [move("pass 1.2", "persistent", undo="high")],
        }
    )
    proposer.hold.clear()  # the moves come once the test lets them
    options = RunOptions(
        op="scripted", proposer="scripted", branches=2, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=20, stagnation=20,
    )  # fmt: skip
    run = create_run(options, runner=ScriptedRunner(), proposer=proposer, op=scripted_op())
    return KernelLadderApp(run=run, frozen=True, batch_interval=0.02), proposer


def toasts(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def test_notices_wait_for_an_open_dialog_and_gates_are_one_toast(tmp_path):
    app, proposer = two_gates_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.branches, "the run started", pilot=pilot)
        await pilot.pause(0.2)
        shown_before = toasts(app)
        await pilot.press("question_mark")  # a dialog open before the gates come
        assert isinstance(app.screen, HelpScreen)
        proposer.hold.set()
        await until(lambda: len(app.fold.view().gates) == 2, "two gates", pilot=pilot)
        await pilot.pause(0.2)
        # no toast over the dialog: neither the new ones nor those shown before it opened
        assert toasts(app) == [], toasts(app)
        await pilot.press("escape")
        await until(
            lambda: len(toasts(app)) > len(shown_before), "toasts once it closed", pilot=pilot
        )
        assert set(shown_before) <= set(toasts(app))  # what it covered is shown again
        gates = [t for t in toasts(app) if "gate" in t]
        assert len(gates) == 1, toasts(app)
        assert "2 gates wait for you: g1, g2" in gates[0] and "press g" in gates[0]


async def test_an_attached_app_announces_only_the_gates_still_waiting(tmp_path):
    import asyncio

    from kernelladder.app.attach import AttachedRun
    from kernelladder.engine.run.control import read_owner

    owner_app, proposer = two_gates_app(tmp_path)
    run = owner_app.bridge.run
    proposer.hold.set()
    task = asyncio.ensure_future(run.run())
    await until(lambda: len(run.state.pending_gates) == 2, "two gates")
    await until(lambda: read_owner(run.run_dir) is not None, "the control channel")
    await run.veto("g1", "not this one")  # decided before anyone attached
    app = KernelLadderApp(run=AttachedRun(run.run_dir, poll_s=0.02), frozen=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.gate("g2") is not None, "g2 on screen", pilot=pilot)
        await pilot.pause(0.2)
        gates = [t for t in toasts(app) if "gate" in t]
        assert gates == ["gate g2 waits for you: persistent — press g to decide"], toasts(app)
    await run.stop()
    await asyncio.wait_for(task, 10)


async def test_gates_raised_apart_are_one_announcement_naming_all_that_wait(tmp_path):
    """Before: gates raised half a second apart gave a toast each."""
    import asyncio

    from helpers import HeldProposer

    first_shown = asyncio.Event()  # b2's gate is raised only once g1's toast was read

    class Apart(HeldProposer):
        async def propose(self, ctx):
            if ctx.branch_id == "b2":
                await first_shown.wait()
                await asyncio.sleep(0.5)
            return await super().propose(ctx)

    proposer = Apart(
        {"b1": [move("pass 1.4", "two-pass", undo="high")],
         "b2": [move("pass 1.2", "persistent", undo="high")]}
    )  # fmt: skip
    options = RunOptions(
        op="scripted", proposer="scripted", branches=2, gate="ask", device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=20, stagnation=20,
    )  # fmt: skip
    run = create_run(options, runner=ScriptedRunner(), proposer=proposer, op=scripted_op())
    app = KernelLadderApp(run=run, frozen=True, batch_interval=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.main.view.gate("g1") is not None, "g1", pilot=pilot)
        await pilot.pause(0.1)
        assert [t for t in toasts(app) if "gate" in t] == [
            "gate g1 waits for you: two-pass — press g to decide"
        ]
        first_shown.set()
        await until(lambda: app.main.view.gate("g2") is not None, "g2", pilot=pilot)
        await pilot.pause(0.2)
        gates = [t for t in toasts(app) if "gate" in t]
        assert len(gates) == 1 and gates[0].startswith("2 gates wait for you: g1, g2"), gates
        assert app.main.named_gates == ("g1", "g2")
