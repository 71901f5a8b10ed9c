"""Textual themes and stylesheets of the project.

Two themes of our own (a dark one for long sessions on a GPU box, a light one for
bright rooms and screenshots); every colour the app uses is a theme variable, so
Textual's built-in themes work as well.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

THEMES_DIR = Path(__file__).parent
STYLESHEET = THEMES_DIR / "kernelladder.tcss"

# Each colour of the two themes side by side: (dark, light).
_COLOURS = dict(
    primary=("#4FA3E0", "#1F64B5"),
    secondary=("#7E6BD6", "#6246C2"),
    accent=("#E8A33D", "#B86A00"),
    warning=("#E8C33D", "#9C7A00"),
    error=("#E0605A", "#B3261E"),
    success=("#5CC98A", "#23803F"),
    foreground=("#DDE3EA", "#1B232C"),
    background=("#10151B", "#F6F7F9"),
    surface=("#171E26", "#FFFFFF"),
    panel=("#1F2933", "#E6EAF0"),
)

KERNELLADDER_DARK = Theme(
    name="kernelladder-dark", dark=True, **{k: dark for k, (dark, _) in _COLOURS.items()}
)
KERNELLADDER_LIGHT = Theme(
    name="kernelladder-light", dark=False, **{k: light for k, (_, light) in _COLOURS.items()}
)

PROJECT_THEMES: tuple[Theme, ...] = (KERNELLADDER_DARK, KERNELLADDER_LIGHT)
DEFAULT_THEME = KERNELLADDER_DARK.name

__all__ = [
    "DEFAULT_THEME",
    "KERNELLADDER_DARK",
    "KERNELLADDER_LIGHT",
    "PROJECT_THEMES",
    "STYLESHEET",
    "THEMES_DIR",
]
