"""The GPU's copy and matmul rates (the floors' ceilings) kept on disk, dated, per
(GPU, driver, torch): measured once, not at the start of every run. An entry older
than STALE_DAYS, or of another GPU, driver or torch, is not used (the rates are measured
again and the entry replaced); `kernelladder doctor --recalibrate` drops the file's
entries and measures again.

The file: $KERNELLADDER_CACHE_DIR/gpu_rates.json (default
$XDG_CACHE_HOME/kernelladder, else ~/.cache/kernelladder). Standard library only: the
caller's side reads and writes it (the worker, behind its walls, never does).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# 2: each rate the best of several medians (timing.best_ms); a file of version 1 holds rates
# of one median each, so it is measured again
SCHEMA_VERSION = 2
STALE_DAYS = 14.0
CACHE_ENV = "KERNELLADDER_CACHE_DIR"
FILE_NAME = "gpu_rates.json"
NVIDIA_VERSION = "/proc/driver/nvidia/version"


@dataclass(frozen=True)
class GpuIdentity:
    """What the rates depend on: the GPU's name, the driver's and torch's versions."""

    gpu: str
    driver: str
    torch: str

    @property
    def key(self) -> str:
        return f"{self.gpu} | driver {self.driver} | torch {self.torch}"


def cache_file() -> Path:
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "kernelladder")
    return Path(root) / FILE_NAME


def driver_version(path: str = NVIDIA_VERSION) -> str:
    """The NVIDIA kernel module's version ("570.86.15"), "" when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else ""


def entries(path: Path | None = None) -> dict[str, Any]:
    """The file's entries by key ({} when there is none or it is of another schema)."""
    return _read(path or cache_file())


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def read_rates(
    identity: GpuIdentity,
    *,
    path: Path | None = None,
    now: dt.datetime | None = None,
    max_age_days: float = STALE_DAYS,
) -> dict[str, float] | None:
    """The rates measured on this (GPU, driver, torch) less than max_age_days ago; None
    when there are none, they are stale, or they were taken on another GPU, driver or
    torch."""
    if not identity.gpu:
        return None
    entry = _read(path or cache_file()).get(identity.key)
    if not isinstance(entry, dict):
        return None
    if (entry.get("gpu"), entry.get("driver"), entry.get("torch")) != (
        identity.gpu, identity.driver, identity.torch,
    ):  # fmt: skip
        return None
    try:
        measured = dt.datetime.fromisoformat(str(entry.get("measured_at")))
    except ValueError:
        return None
    now = now or dt.datetime.now(dt.UTC)
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=dt.UTC)
    age_days = (now - measured).total_seconds() / 86400.0
    if age_days < 0 or age_days >= max_age_days:
        return None
    rates = entry.get("rates")
    if not isinstance(rates, dict) or not rates:
        return None
    return {str(k): float(v) for k, v in rates.items() if isinstance(v, int | float)}


def write_rates(
    identity: GpuIdentity,
    rates: dict[str, float],
    *,
    path: Path | None = None,
    now: dt.datetime | None = None,
) -> bool:
    """Keep the rates measured on `identity`, dated; False when the file cannot be
    written (a read-only home: the next run measures again)."""
    if not identity.gpu or not rates:
        return False
    path = path or cache_file()
    entries = _read(path)
    entries[identity.key] = {
        "gpu": identity.gpu,
        "driver": identity.driver,
        "torch": identity.torch,
        "measured_at": (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
        "rates": {k: float(v) for k, v in rates.items()},
    }
    text = json.dumps({"schema_version": SCHEMA_VERSION, "entries": entries}, indent=1)
    return write_cache_file(path, text)


def write_cache_file(path: Path, text: str) -> bool:
    """A file of the cache directory written whole (a temporary file of this process's
    own, then renamed over it: readers and other writers never see half of one); False
    when it cannot be written (a read-only home: the cache is only missed)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def forget(path: Path | None = None) -> int:
    """Drop every entry (doctor --recalibrate); how many there were."""
    path = path or cache_file()
    count = len(_read(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return count
