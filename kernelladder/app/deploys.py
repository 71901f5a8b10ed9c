"""Deploys started from the app (the d key): `kernelladder deploy RUN_DIR --attempt N` in a
child process, so the model, torch and Triton's interpreter never hold the UI's loop.

The child records its result in the run's log itself (directly, or through the live
run's control channel); the board keeps what is running, what failed and what finished
in this session, so the Deploy tab shows a result before a replay's timeline has it.
Nothing here imports textual.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the deploy command, run by this interpreter (the console script may not be on PATH)
ENTRY = "import sys; from kernelladder.cli import main; sys.exit(main(sys.argv[1:]))"
MAX_ERROR_CHARS = 300


@dataclass
class DeployBoard:
    running: dict[int, str] = field(default_factory=dict)  # attempt -> last progress line
    failed: dict[int, str] = field(default_factory=dict)  # attempt -> why, one line
    done: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # this session's

    def records(self, attempt: int, folded: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The attempt's deploys: those the log holds (folded) and this session's that
        the view has not folded yet (a replay's timeline ends where it was loaded)."""
        seen = {d.get("seq") for d in folded}
        extra = [
            d
            for d in self.done.get(attempt, [])
            if d.get("seq") not in seen or d.get("seq") is None
        ]
        return [*folded, *extra]


def deploy_command(run_dir: str | Path, attempt: int) -> list[str]:
    return [
        sys.executable, "-c", ENTRY, "deploy", str(run_dir), "--attempt", str(attempt),
        "--json", "--progress",
    ]  # fmt: skip


async def run_deploy_process(
    run_dir: str | Path, attempt: int, on_line: Callable[[str], None]
) -> tuple[dict[str, Any] | None, str]:
    """(the record as the Deploy tab shows it, "") or (None, why it failed, one line).
    Progress lines of the child's stderr go to `on_line` as they come."""
    proc = await asyncio.create_subprocess_exec(
        *deploy_command(run_dir, attempt),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    assert proc.stdout is not None and proc.stderr is not None
    last_error = ""

    async def read_stderr() -> None:
        nonlocal last_error
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            if line.startswith("progress: "):
                on_line(line.removeprefix("progress: "))
            else:
                last_error = line

    reader = asyncio.create_task(read_stderr())
    try:
        out = await proc.stdout.read()
        code = await proc.wait()
        await reader
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
        raise
    text = out.decode("utf-8", "replace").strip()
    if code not in (0, 1) or not text:
        why = last_error or f"kernelladder deploy exited with {code}"
        return None, why.removeprefix("kernelladder: error: ")[:MAX_ERROR_CHARS]
    try:
        result = json.loads(text.splitlines()[-1])
    except ValueError:
        return None, f"kernelladder deploy printed no result ({text[:80]!r})"
    recorded = result.pop("recorded", None) or {}
    return {
        "seq": recorded.get("seq"),
        "attempt": result.get("attempt"),
        "op": result.get("op"),
        "model": (result.get("model") or {}).get("name"),
        "status": result.get("status"),
        "summary": result.get("summary", ""),
        "result": result,
        "recorded": recorded.get("how", ""),
    }, ""
