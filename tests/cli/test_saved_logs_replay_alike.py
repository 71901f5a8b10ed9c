"""Every saved log the repository keeps (tests/data and examples/) replays to the same
`kernelladder replay RUN_DIR --json`, byte for byte, as when its expected text was
written: a change of the code's layout changes no summary.

The expected texts live in tests/data/replay-json/, one per run directory. A log
recorded anew (a re-recorded example) gets its text written on purpose:

    python3 tests/cli/test_saved_logs_replay_alike.py --write
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "data" / "replay-json"


def saved_runs() -> list[Path]:
    logs = sorted((ROOT / "tests" / "data").rglob("events.jsonl"))
    logs += sorted((ROOT / "examples").rglob("events.jsonl"))
    return [log.parent for log in logs]


def expected_path(run_dir: Path) -> Path:
    name = "__".join(run_dir.relative_to(ROOT).parts)
    return EXPECTED / f"{name}.json"


def replay_json(run_dir: Path) -> str:
    from kernelladder.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["replay", str(run_dir), "--json"])
    assert code == 0, f"replay {run_dir} exited {code}"
    # the run directory's own path is the only text that may differ between checkouts
    return out.getvalue().replace(str(run_dir), "<RUN_DIR>")


def test_every_saved_log_has_an_expected_summary():
    missing = [str(r.relative_to(ROOT)) for r in saved_runs() if not expected_path(r).exists()]
    assert not missing, f"write them: python3 {Path(__file__).relative_to(ROOT)} --write"


@pytest.mark.parametrize("run_dir", saved_runs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_saved_log_replays_to_its_expected_summary(run_dir: Path):
    expected = expected_path(run_dir)
    if not expected.exists():
        pytest.skip("no expected summary yet (the test above names it)")
    assert replay_json(run_dir) == expected.read_text()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    EXPECTED.mkdir(parents=True, exist_ok=True)
    for run in saved_runs():
        expected_path(run).write_text(replay_json(run))
        print(expected_path(run).relative_to(ROOT))
