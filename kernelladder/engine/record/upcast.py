"""Old logs read as today's, in one place: each event of an older schema is upcast here as
it is read, so the fold, the views and the proposers only ever see the current schema.

Schema 1 -> 2:
- VerdictReady / BestConfirmed: the practical margin applied to the recorded per-shape
  words (a shape "slower" by 0.24 % reads "tie"), and a re-measure that was "slower" only
  by such a shape held.
- ProposalReceived of the built-in search without its grid point in `meta`: the point
  read back from the `# kernelladder-search:` header of the attempt's saved source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kernelladder.engine.record import standing_rank
from kernelladder.engine.record.events import SCHEMA_VERSION

SLOWER_REASON = "slower than the fastest baseline at"  # best_confirmation's words
_SEARCH_HEADER = re.compile(r"^# kernelladder-search: (\{.*\})\s*$", re.MULTILINE)


def upcast(d: dict[str, Any], run_dir: str | Path | None = None) -> dict[str, Any]:
    """The event's JSON form in today's schema (the same dict when it is already)."""
    version = d.get("schema_version", 1)
    if not isinstance(version, int) or version >= SCHEMA_VERSION:
        return d
    d = dict(d)
    step = _TO_2.get(d.get("kind", ""))
    if step is not None:
        step(d, run_dir)
    d["schema_version"] = SCHEMA_VERSION
    return d


def _verdict_ready(d: dict[str, Any], run_dir: Any) -> None:
    recorded = d.get("standing_shapes") or {}
    shapes = standing_rank.judged_rows(recorded)
    d["standing_shapes"] = shapes
    if shapes and shapes != recorded:
        d["standing"] = standing_rank.rows_text(shapes)


def _best_confirmed(d: dict[str, Any], run_dir: Any) -> None:
    shapes = standing_rank.judged_rows(d.get("shapes") or {})
    d["shapes"] = shapes
    detail = str(d.get("detail") or "")
    slower = any(row.get("standing") == "slower" for row in shapes.values())
    if not d.get("held") and detail.startswith(SLOWER_REASON) and shapes and not slower:
        d["held"] = True
        margin = f"{standing_rank.PRACTICAL_MARGIN:.0%}"
        d["detail"] = f"held within the {margin} practical margin (recorded: {detail})"


def _proposal_received(d: dict[str, Any], run_dir: Any) -> None:
    meta = d.get("meta") if isinstance(d.get("meta"), dict) else {}
    if d.get("proposer") != "search" or "params" in meta or run_dir is None:
        return
    try:
        source = (Path(run_dir) / "attempts" / f"{d['attempt']}.py").read_text()
    except (OSError, KeyError, UnicodeDecodeError):
        return
    point = search_header(source)
    if point is not None:
        d["meta"] = {**meta, "family": point["family"], "params": point["params"]}


def search_header(source: str | None) -> dict[str, Any] | None:
    """{"op", "family", "params"} of the header a search source of an old log starts with."""
    m = _SEARCH_HEADER.search((source or "")[:4096])
    try:
        data = json.loads(m.group(1)) if m else None
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        return None
    if not isinstance(data.get("family"), str) or not isinstance(data.get("op"), str):
        return None
    return data


_TO_2 = {
    "verdict_ready": _verdict_ready,
    "best_confirmed": _best_confirmed,
    "proposal_received": _proposal_received,
}
