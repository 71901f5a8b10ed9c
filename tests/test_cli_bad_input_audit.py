"""Bad input to the headless CLI, found by an audit: each case gets one clear line on
stderr and a non-zero exit (2 for usage), never a traceback, and nothing already
recorded in a run directory is lost. In-process through `main` where that suffices; a
subprocess where the failure shows only at the process edge (a closed pipe, file
permissions)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelladder.cli import main
from kernelladder.cli import tui as tui_cli

ROOT = Path(__file__).resolve().parents[1]
CPU_RUN = ROOT / "examples" / "cpu-rmsnorm-run"


def _usage_line(capsys, *argv: str, entry=main) -> str:
    """Run the CLI in-process; it must exit 2 with exactly one line on stderr."""
    try:
        code = entry(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def _saved_run(tmp_path: Path, name: str = "run") -> Path:
    run_dir = tmp_path / name
    shutil.copytree(CPU_RUN, run_dir)
    return run_dir


# --- numbers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--budget-usd", "--target", "--time-limit", "--timeout", "--gate-timeout"]
)
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_optimize_rejects_non_finite_numbers(capsys, tmp_path, flag, value):
    # nan passed `>= 0` (a budget that never trips) and inf reached the log as Infinity
    # an unknown op too, so that code accepting the number stops before running anything
    line = _usage_line(
        capsys, "optimize", "nosuchop", "--run-dir", str(tmp_path / "r"), flag, value
    )
    assert flag in line and "finite" in line
    assert not (tmp_path / "r").exists()


def test_tui_rejects_an_infinite_replay_speed(capsys):
    # an op as well, so that code accepting the speed stops before the app starts
    argv = ["--replay", str(CPU_RUN), "rmsnorm", "--speed", "inf"]
    line = _usage_line(capsys, *argv, entry=tui_cli.main)
    assert "--speed" in line and "finite" in line


# --- hints files -------------------------------------------------------------------------


def test_binary_or_special_hints_files_are_one_line(capsys, tmp_path):
    binary = tmp_path / "hints.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    run_dir = str(tmp_path / "r")
    # a binary file raised AttributeError ('UnicodeDecodeError' has no strerror)
    line = _usage_line(capsys, "optimize", "rmsnorm", "--run-dir", run_dir, "--hints", str(binary))
    assert "cannot read hints file" in line and "not UTF-8 text" in line
    saved = _saved_run(tmp_path)
    line = _usage_line(capsys, "optimize", "--resume", str(saved), "--hints", str(binary))
    assert "cannot read hints file" in line and "not UTF-8 text" in line
    # a device is not a hints file (reading /dev/zero would never end)
    line = _usage_line(capsys, "optimize", "rmsnorm", "--run-dir", run_dir, "--hints", "/dev/zero")
    assert "not a regular file" in line
    assert not (tmp_path / "r").exists()


# --- damaged or mistaken run directories -------------------------------------------------


def _insert_line(run_dir: Path, index: int, line: str) -> None:
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(index, line)
    path.write_text("".join(lines))


def test_a_file_given_as_a_run_directory_is_one_line(capsys, tmp_path):
    a_file = tmp_path / "cand.py"
    a_file.write_text("x = 1\n")
    # NotADirectoryError escaped both readers
    assert "not a run directory" in _usage_line(capsys, "replay", str(a_file))
    assert "not a run directory" in _usage_line(capsys, "optimize", "--resume", str(a_file))


def test_a_json_line_that_is_not_an_object_is_a_corrupt_line(capsys, tmp_path):
    run_dir = _saved_run(tmp_path)
    _insert_line(run_dir, 3, "[1, 2, 3]\n")  # valid JSON, not an event: AttributeError before
    before = (run_dir / "events.jsonl").read_bytes()
    for argv in (["replay", str(run_dir)], ["optimize", "--resume", str(run_dir)]):
        line = _usage_line(capsys, *argv)
        assert "corrupt line" in line and "expected a JSON object" in line
    assert (run_dir / "events.jsonl").read_bytes() == before  # nothing repaired or lost


def test_meta_json_that_is_not_an_object_is_one_line(capsys, tmp_path):
    run_dir = _saved_run(tmp_path)
    (run_dir / "meta.json").write_text("[1, 2]\n")  # AttributeError ('list' has no .get)
    line = _usage_line(capsys, "optimize", "--resume", str(run_dir))
    assert "meta.json" in line and "expected a JSON object" in line
