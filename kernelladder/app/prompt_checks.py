"""What the main screen's prompts accept: a target speedup, a file to export to."""

from __future__ import annotations

from pathlib import Path


def parse_target(text: str) -> float | None:
    text = text.strip().rstrip("x×").strip()
    if text.lower() in ("", "none", "off"):
        return None
    return float(text)


def target_error(text: str) -> str | None:
    try:
        value = parse_target(text)
    except ValueError:
        return f"Not a number: {text.strip()!r}"
    if value is not None and not value > 0:
        return "The target must be a speedup above 0, e.g. 1.5"
    return None


def export_path_error(text: str) -> str | None:
    if not text.strip():
        return "Give a file name."
    path = Path(text.strip()).expanduser()
    if path.exists():
        return f"{path} exists: choose another name."
    if not path.parent.is_dir():
        return f"No such directory: {path.parent}"
    return None
