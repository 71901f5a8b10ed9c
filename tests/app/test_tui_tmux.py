"""The real `kernelladder-tui` console script in a real terminal (tmux): start it, send
keys, read the screen back."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import ROOT, Terminal

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (./dev/test installs it)"),
]

EXAMPLE = ROOT / "examples" / "cpu-rmsnorm-run"
EXAMPLE = Path(os.environ.get("KL_TUI_EXAMPLE", EXAMPLE))


def _script() -> str:
    exe = shutil.which("kernelladder-tui")
    assert exe, "the console script is installed by `pip install -e .`"
    return exe


def test_replay_in_a_real_terminal(tmp_path):
    run_dir = EXAMPLE
    if not (run_dir / "events.jsonl").is_file():
        pytest.skip("examples/cpu-rmsnorm-run is not there")
    term = Terminal(f"{_script()} --replay {run_dir} --end", tmp_path)
    try:
        screen = term.wait_for("speed not measured (no GPU)")
        assert "KernelLadder" in screen and "rmsnorm" in screen and "REPLAY" in screen
        term.keys("?")
        assert "KernelLadder keys" in term.wait_for("KernelLadder keys")
        term.keys("Escape")
        term.keys("x")  # steering is off in a replay: nothing opens
        time.sleep(0.5)
        assert "Prune branch" not in term.screen()
        term.keys("q")
        deadline = time.monotonic() + 15
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not term.alive()
    finally:
        term.close()


@pytest.mark.slow
def test_live_cpu_run_in_a_real_terminal(tmp_path):
    """A real run: search proposer, CPU verifier (Triton interpreter), no API key."""
    env_note = "" if not os.environ.get("ANTHROPIC_API_KEY") else "env -u ANTHROPIC_API_KEY "
    run_dir = tmp_path / "run"
    term = Terminal(
        f"{env_note}{_script()} rmsnorm --device cpu --max-attempts 3 --branches 1 "
        f"--gate veto --run-dir {run_dir}",
        tmp_path,
    )
    try:
        screen = term.wait_for("speed not measured (no GPU)", timeout=60)
        assert "rmsnorm" in screen and "search" in screen
        term.wait_for("#1", timeout=120)  # the first attempt is in the tree
        term.keys("q")
        term.wait_for("Stop the run and quit?")
        term.keys("y")
        deadline = time.monotonic() + 120
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not term.alive()
    finally:
        term.close()
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    assert '"kind":"run_finished"' in lines[-1]  # the log is complete


@pytest.mark.slow
def test_quitting_a_live_run_says_where_it_is_and_how_to_replay_and_resume_it(tmp_path):
    """Before: quitting printed nothing; a run without --run-dir went to runs/<id> and
    neither the terminal nor the stop dialog named it."""
    term = Terminal(
        f"sh -c '{_script()} rmsnorm --device cpu --max-attempts 2 --branches 1 --gate veto; "
        "sleep 60'",
        tmp_path,
    )
    try:
        term.wait_for("finished", timeout=180)
        term.keys("q")
        screen = term.wait_for("resume it:", timeout=30)
        run_dir = next(line for line in screen.splitlines() if "the run is in runs/" in line)
        run_dir = run_dir.split("the run is in ", 1)[1].split("/ (", 1)[0]
        assert "finished: max-attempts" in screen, screen
        assert f"kernelladder-tui --replay {run_dir}" in screen
        assert f"kernelladder replay {run_dir}" in screen
        assert f"kernelladder-tui --resume {run_dir}" in screen
        assert (tmp_path / run_dir / "events.jsonl").is_file()
    finally:
        term.close()
