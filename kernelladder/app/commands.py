"""The command palette's steering commands: every key binding of the main screen, by
name. A command that does not apply now (a replay, a finished run) says so in the list,
"not now: why", and says why again instead of doing nothing when it is chosen."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from kernelladder.app.actions import palette_actions


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    action: str  # an action of the main screen


# built from app/actions.py, where each action is declared once
PALETTE_COMMANDS: tuple[PaletteCommand, ...] = tuple(
    PaletteCommand(a.palette[1], a.palette[2], a.screen_action)  # type: ignore[index]
    for a in palette_actions()
)


class SteeringCommands(Provider):
    def _help(self, cmd: PaletteCommand) -> str:
        refusal = getattr(self.screen, "palette_refusal", None)
        why = refusal(cmd.action) if callable(refusal) else None
        return f"not now: {why}" if why else cmd.help

    async def discover(self) -> Hits:
        for cmd in PALETTE_COMMANDS:
            yield DiscoveryHit(cmd.title, partial(self._run, cmd), help=self._help(cmd))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for cmd in PALETTE_COMMANDS:
            score = matcher.match(cmd.title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(cmd.title),
                    partial(self._run, cmd),
                    help=self._help(cmd),
                )

    async def _run(self, cmd: PaletteCommand) -> None:
        screen = self.app.screen
        run_from_palette = getattr(screen, "run_from_palette", None)
        if run_from_palette is None:
            self.app.notify("Close the open dialog first.", severity="warning")
            return
        await run_from_palette(cmd.action)
