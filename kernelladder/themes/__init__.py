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

KERNELLADDER_DARK = Theme(
    name="kernelladder-dark",
    primary="#4FA3E0",
    secondary="#7E6BD6",
    accent="#E8A33D",
    warning="#E8C33D",
    error="#E0605A",
    success="#5CC98A",
    foreground="#DDE3EA",
    background="#10151B",
    surface="#171E26",
    panel="#1F2933",
    dark=True,
)

KERNELLADDER_LIGHT = Theme(
    name="kernelladder-light",
    primary="#1F64B5",
    secondary="#6246C2",
    accent="#B86A00",
    warning="#9C7A00",
    error="#B3261E",
    success="#23803F",
    foreground="#1B232C",
    background="#F6F7F9",
    surface="#FFFFFF",
    panel="#E6EAF0",
    dark=False,
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
