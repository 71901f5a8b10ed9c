"""Where the built-in ops' folders are and what they hold (plain paths: no torch, so the
app and the registry read them as well as the specs)."""

from __future__ import annotations

import importlib
from pathlib import Path

OPS_DIR = Path(__file__).resolve().parent


def start_path(name: str) -> Path:
    """Where the built-in op `name` keeps its starting candidate: start.py in its folder."""
    package = importlib.import_module(f"{__package__}.{name}")
    return Path(package.__file__ or OPS_DIR / name / "__init__.py").parent / "start.py"
