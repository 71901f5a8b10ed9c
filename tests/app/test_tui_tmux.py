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
