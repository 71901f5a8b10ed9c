"""The command palette's steering commands: every key binding of the main screen, by
name. A command that does not apply now (a replay, a finished run) says why instead of
doing nothing."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    action: str  # an action of the main screen


PALETTE_COMMANDS: tuple[PaletteCommand, ...] = (
    PaletteCommand("Prune selected branch", "Stop the branch and its subtree", "prune_branch"),
    PaletteCommand("Edit global hints", "Hints for every branch's next proposals", "edit_hints"),
    PaletteCommand(
        "Edit branch hints", "Hints for the selected branch's next proposals", "edit_branch_hints"
    ),
    PaletteCommand("Approve selected gate", "Let the risky move be verified", "approve_gate"),
    PaletteCommand("Veto selected gate", "Make the move a dead end of its branch", "veto_gate"),
    PaletteCommand("Open gate prompt", "See the selected gate in full and decide", "open_gate"),
    PaletteCommand("Pause / resume run", "No new proposals while paused", "toggle_run_pause"),
    PaletteCommand(
        "Pause / resume selected branch", "Hold one branch, others go on", "toggle_branch_pause"
    ),
    PaletteCommand(
        "Open branch from selected attempt", "A new line of attack from here", "open_branch"
    ),
    PaletteCommand("Change target speedup", "Branches stop once they reach it", "change_target"),
    PaletteCommand("Stop run", "Finish in-flight attempts and end the run", "stop_run"),
    PaletteCommand("Export best kernel", "Write the best passing source to a file", "export_best"),
    PaletteCommand("Follow newest attempt", "Keep the newest attempt selected", "follow_newest"),
    PaletteCommand("Show key map", "Every key and what it does", "help"),
    PaletteCommand("Replay: play / pause", "Replay only", "replay_toggle"),
    PaletteCommand("Replay: step forward", "One event forward", "replay_step(1)"),
    PaletteCommand("Replay: step back", "One event back", "replay_step(-1)"),
    PaletteCommand("Replay: jump to end", "Show the final state", "replay_end"),
    PaletteCommand("Replay: jump to start", "Show the first event", "replay_start"),
    PaletteCommand("Replay: faster", "Double the speed", "replay_faster"),
    PaletteCommand("Replay: slower", "Halve the speed", "replay_slower"),
)


class SteeringCommands(Provider):
    async def discover(self) -> Hits:
        for cmd in PALETTE_COMMANDS:
            yield DiscoveryHit(cmd.title, partial(self._run, cmd), help=cmd.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for cmd in PALETTE_COMMANDS:
            score = matcher.match(cmd.title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(cmd.title), partial(self._run, cmd), help=cmd.help
                )

    async def _run(self, cmd: PaletteCommand) -> None:
        screen = self.app.screen
        run_from_palette = getattr(screen, "run_from_palette", None)
        if run_from_palette is None:
            self.app.notify("Close the open dialog first.", severity="warning")
            return
        await run_from_palette(cmd.action)
