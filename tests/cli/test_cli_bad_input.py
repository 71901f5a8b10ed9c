"""Bad input to the headless CLI: each case gets one clear line on
stderr and a non-zero exit (2 for usage), never a traceback, and nothing already
recorded in a run directory is lost. In-process through `main` where that suffices; a
subprocess where the failure shows only at the process edge (a closed pipe, file
permissions)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import H200_RUNS, ROOT, insert_line, saved_run, usage_line

from kernelladder.cli import main
from kernelladder.cli import tui as tui_cli
from kernelladder.engine.proposers.replay import ReplayProposer

CPU_RUN = ROOT / "examples" / "cpu-rmsnorm-run"


def _cli(*argv: str, cwd: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")  # no wrapped lines
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "kernelladder", *argv],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _without_root_powers() -> list[str]:
    """A prefix under which file permissions apply (root ignores them)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot be tested")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


# --- numbers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--budget-usd", "--target", "--time-limit", "--timeout", "--gate-timeout"]
)
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_optimize_rejects_non_finite_numbers(capsys, tmp_path, flag, value):
    # nan passed `>= 0` (a budget that never trips) and inf reached the log as Infinity
    # an unknown op too, so that code accepting the number stops before running anything
    line = usage_line(capsys, "optimize", "nosuchop", "--run-dir", str(tmp_path / "r"), flag, value)
    assert flag in line and "finite" in line
    assert not (tmp_path / "r").exists()


def test_tui_rejects_an_infinite_replay_speed(capsys):
    # an op as well, so that code accepting the speed stops before the app starts
    argv = ["--replay", str(CPU_RUN), "rmsnorm", "--speed", "inf"]
    line = usage_line(capsys, *argv, entry=tui_cli.main)
    assert "--speed" in line and "finite" in line


# --- hints files -------------------------------------------------------------------------


def test_binary_or_special_hints_files_are_one_line(capsys, tmp_path):
    binary = tmp_path / "hints.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    run_dir = str(tmp_path / "r")
    # a binary file raised AttributeError ('UnicodeDecodeError' has no strerror)
    line = usage_line(capsys, "optimize", "rmsnorm", "--run-dir", run_dir, "--hints", str(binary))
    assert "cannot read hints file" in line and "not UTF-8 text" in line
    saved = saved_run(tmp_path)
    line = usage_line(capsys, "optimize", "--resume", str(saved), "--hints", str(binary))
    assert "cannot read hints file" in line and "not UTF-8 text" in line
    # a device is not a hints file (reading /dev/zero would never end)
    line = usage_line(capsys, "optimize", "rmsnorm", "--run-dir", run_dir, "--hints", "/dev/zero")
    assert "not a regular file" in line
    assert not (tmp_path / "r").exists()


def test_a_hints_file_with_a_line_the_op_does_not_understand_is_one_line(capsys, tmp_path):
    """The app's editor refuses such a line, and so does the CLI: it would have no effect
    anywhere (the engine reads hints with the op's vocabulary)."""
    hints = tmp_path / "hints.txt"
    hints.write_text("keep the rows short\nfix ROWS=3\n", encoding="utf-8")
    run_dir = str(tmp_path / "r")
    line = usage_line(capsys, "optimize", "rmsnorm", "--run-dir", run_dir, "--hints", str(hints))
    assert line.endswith(
        f"hints file {hints}: not understood: fix ROWS=3 (ROWS takes one of 1, 2, 4, 8, 16)"
    ), line
    saved = saved_run(tmp_path)  # a resumed rmsnorm run reads new hints the same way
    line = usage_line(capsys, "optimize", "--resume", str(saved), "--hints", str(hints))
    assert "not understood: fix ROWS=3" in line
    assert not (tmp_path / "r").exists()


# --- damaged or mistaken run directories -------------------------------------------------


def test_a_file_given_as_a_run_directory_is_one_line(capsys, tmp_path):
    a_file = tmp_path / "cand.py"
    a_file.write_text("x = 1\n")
    # NotADirectoryError escaped both readers
    assert "not a run directory" in usage_line(capsys, "replay", str(a_file))
    assert "not a run directory" in usage_line(capsys, "optimize", "--resume", str(a_file))


def test_a_json_line_that_is_not_an_object_is_a_corrupt_line(capsys, tmp_path):
    run_dir = saved_run(tmp_path)
    insert_line(run_dir, 3, "[1, 2, 3]\n")  # valid JSON, not an event: AttributeError before
    before = (run_dir / "events.jsonl").read_bytes()
    for argv in (["replay", str(run_dir)], ["optimize", "--resume", str(run_dir)]):
        line = usage_line(capsys, *argv)
        assert "corrupt line" in line and "expected a JSON object" in line
    assert (run_dir / "events.jsonl").read_bytes() == before  # nothing repaired or lost


def test_meta_json_that_is_not_an_object_is_one_line(capsys, tmp_path):
    run_dir = saved_run(tmp_path)
    (run_dir / "meta.json").write_text("[1, 2]\n")  # AttributeError ('list' has no .get)
    line = usage_line(capsys, "optimize", "--resume", str(run_dir))
    assert "meta.json" in line and "expected a JSON object" in line


def test_run_dir_that_is_a_file_or_under_one_is_one_line(capsys, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    # FileExistsError / NotADirectoryError from mkdir escaped as tracebacks
    line = usage_line(capsys, "optimize", "rmsnorm", "--device", "cpu", "--run-dir", str(a_file))
    assert "is not a directory" in line
    under = str(a_file / "run")
    line = usage_line(capsys, "optimize", "rmsnorm", "--device", "cpu", "--run-dir", under)
    assert "cannot create or write the run directory" in line and "Not a directory" in line
    assert a_file.read_text() == "mine\n"


def test_run_dir_holding_a_runs_files_without_its_log_is_refused(capsys, tmp_path):
    saved = saved_run(tmp_path)
    (saved / "events.jsonl").unlink()  # meta.json and attempts/ stay: a new run overwrote them
    before = {p.name: p.read_bytes() for p in (saved / "attempts").iterdir()}
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--run-dir"]
    line = usage_line(capsys, *argv, str(saved))
    assert "holds meta.json and attempts/ but no events.jsonl" in line
    assert {p.name: p.read_bytes() for p in (saved / "attempts").iterdir()} == before
    assert not (saved / "events.jsonl").exists()


def test_resume_of_an_emptied_log_beside_recorded_attempts_is_refused(capsys, tmp_path):
    saved = saved_run(tmp_path)
    (saved / "events.jsonl").write_bytes(b"")
    before = {p.name: p.read_bytes() for p in (saved / "attempts").iterdir()}
    # it used to start again at attempt 1 and overwrite attempts/1.py and 1.json
    line = usage_line(capsys, "optimize", "--resume", str(saved), "--max-attempts", "1")
    assert "holds no events but attempts/ holds files" in line
    assert {p.name: p.read_bytes() for p in (saved / "attempts").iterdir()} == before
    assert (saved / "events.jsonl").read_bytes() == b""


def test_read_only_run_directories_are_one_line(tmp_path):
    prefix = _without_root_powers()
    locked = tmp_path / "locked"
    locked.mkdir()
    saved = saved_run(tmp_path)
    before = (saved / "events.jsonl").read_bytes()
    for path in (locked, saved, saved / "attempts"):
        path.chmod(0o555)
    (saved / "events.jsonl").chmod(0o444)
    try:
        new_run = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1"]
        line = _one_line(_cli(*new_run, "--run-dir", str(locked), cwd=tmp_path, prefix=prefix))
        assert "cannot create or write the run directory" in line and "Permission denied" in line
        resumed = _cli("optimize", "--resume", str(saved), cwd=tmp_path, prefix=prefix)
        assert "Permission denied" in _one_line(resumed)
    finally:
        for path in (locked, saved, saved / "attempts"):
            path.chmod(0o755)
    assert (saved / "events.jsonl").read_bytes() == before


_HOLD_THE_LOG = """
import sys
from kernelladder.engine.record.log import EventLog
log = EventLog(sys.argv[1])
log._file.write(b'{"kind":"notice","seq":')  # a line half written by the live run
log._file.flush()
print("writing", flush=True)
sys.stdin.read()
"""


def test_resume_of_a_run_another_process_is_writing_is_refused(tmp_path):
    saved = saved_run(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOG, str(saved)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "writing"
        before = (saved / "events.jsonl").read_bytes()
        # a second writer used to cut the live line as a torn tail, then log under the
        # same seq numbers as the live run (and reuse its attempt numbers)
        line = _one_line(_cli("optimize", "--resume", str(saved), cwd=tmp_path))
        assert "another process is writing this run" in line
        assert (saved / "events.jsonl").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    from kernelladder.engine.record.log import EventLog, repair_tail

    assert repair_tail(saved)  # the killed writer's lock is gone with it
    EventLog(saved).close()


# --- replay --reverify -------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["-5", "0", "nan"])
def test_reverify_rejects_a_timeout_that_is_not_positive(capsys, timeout):
    # it re-ran every attempt with that limit and reported each pass as "fail at timeout"
    argv = ["replay", str(CPU_RUN), "--reverify", "--device", "cpu", "--timeout", timeout]
    assert "--timeout must be a positive number" in usage_line(capsys, *argv)


def test_reverify_on_cuda_without_a_gpu_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    # the worker's 'Torch not compiled with CUDA enabled' escaped as a RunnerLost traceback
    line = usage_line(capsys, "replay", str(CPU_RUN), "--reverify", "--device", "cuda")
    assert "no CUDA GPU" in line


def test_reverify_names_what_meta_json_lacks(capsys, tmp_path):
    saved = saved_run(tmp_path)
    (saved / "meta.json").write_text('{"run_id": "x"}\n')
    line = usage_line(capsys, "replay", str(saved), "--reverify", "--device", "cpu")
    assert "meta.json has no usable op" in line  # it said only "cannot re-verify: 'op'"


# --- the process edge --------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "kernelladder", "ops", "--json"],
        ["-m", "kernelladder.cli.tui", "--headless", "--replay", str(CPU_RUN)],
    ],
    ids=["ops", "tui-headless-replay"],
)
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path, argv):
    # `kernelladder ops --json | head -c 10` printed a BrokenPipeError traceback
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
        env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) != 0
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


# --- empty settings ----------------------------------------------------------------------


def test_an_empty_remote_setting_is_refused_not_dropped(capsys, tmp_path):
    # `--ssh-target "$UNSET"` used to verify locally without a word
    cand = str(ROOT / "tests" / "cheats" / "honest_rmsnorm.py")
    # --device cuda: code that drops the empty target stops at once (no GPU) or at the
    # runner's start, instead of verifying on this machine
    check = ["check", "rmsnorm", cand, "--device", "cuda"]
    assert "target is empty" in usage_line(capsys, *check, "--ssh-target", "")
    assert "--remote-config is empty" in usage_line(capsys, *check, "--remote-config", "")
    assert "target is empty" in usage_line(capsys, "doctor", "--ssh-target", "")
    run_dir = str(tmp_path / "r")
    optimize = ["optimize", "rmsnorm", "--device", "cuda", "--run-dir", run_dir]
    assert "target is empty" in usage_line(capsys, *optimize, "--ssh-target", "")
    assert not (tmp_path / "r").exists()


def test_runner_local_beside_a_remote_host_is_refused_not_ignored(capsys, tmp_path):
    # a run asks for one runner: --runner local with an SSH host used to go remote unsaid
    run_dir = str(tmp_path / "r")
    optimize = ["optimize", "rmsnorm", "--device", "cpu", "--run-dir", run_dir]
    line = usage_line(capsys, *optimize, "--runner", "local", "--ssh-target", "gpu-box")
    assert line.endswith("--runner local and --remote do not go together")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flag", ["--resume", "--run-dir", "--replay-from", "--hints"])
def test_an_empty_path_option_is_refused(capsys, flag):
    # `--resume ""` started a whole new run; `--run-dir ""` put it in runs/<id>;
    # an unknown op stops code that lets the empty value through before any run
    line = usage_line(capsys, "optimize", "nosuchop", flag, "")
    assert f"{flag} is empty" in line


@pytest.mark.parametrize("flag", ["--replay", "--resume"])
def test_tui_empty_run_directory_is_refused(capsys, flag):
    assert f"{flag} is empty" in usage_line(capsys, flag, "", entry=tui_cli.main)


def test_tui_replay_of_a_log_without_events_is_refused(capsys, tmp_path):
    saved = saved_run(tmp_path)
    (saved / "events.jsonl").write_bytes(b"")
    # the headless replay printed an empty table with exit 0 (the app waited for ever);
    # both read the log through the same loader
    line = usage_line(capsys, "--headless", "--replay", str(saved), entry=tui_cli.main)
    assert "holds no events" in line


def test_a_local_cuda_run_without_a_gpu_is_refused_before_it_is_recorded(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    run_dir = tmp_path / "new"
    # it made the run directory, logged a run that ended on 'Torch not compiled with
    # CUDA enabled' and exited 1; a resume appended that to a GPU run's log
    argv = ["optimize", "rmsnorm", "--device", "cuda", "--max-attempts", "1"]
    assert "no CUDA GPU" in usage_line(capsys, *argv, "--run-dir", str(run_dir))
    assert not run_dir.exists()
    gpu_run = tmp_path / "h200"
    shutil.copytree(H200_RUNS / "rmsnorm-search", gpu_run)
    before = (gpu_run / "events.jsonl").read_bytes()
    line = usage_line(capsys, "optimize", "--resume", str(gpu_run), "--max-attempts", "99")
    assert "no CUDA GPU" in line
    assert (gpu_run / "events.jsonl").read_bytes() == before


def test_a_problem_file_with_a_null_byte_names_no_line_none(capsys, tmp_path):
    problem = tmp_path / "nul.py"
    problem.write_bytes(b"x = 1\x00\n")
    line = usage_line(capsys, "ops", str(problem))
    assert "syntax error" in line and "null bytes" in line
    assert "line None" not in line  # it said "syntax error at line None: ..."


_HOLD_OPEN = """
import sys
from kernelladder.engine.record.log import EventLog
log = EventLog(sys.argv[1])
print("writing", flush=True)
sys.stdin.read()
"""


def test_replay_of_a_live_run_does_not_tell_to_resume_it(tmp_path):
    saved = saved_run(tmp_path)
    log = saved / "events.jsonl"
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-1]))  # unfinished
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_OPEN, str(saved)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "writing"
        # it said "the run did not finish; `optimize --resume RUN_DIR` continues it"
        out = _cli("replay", str(saved), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "still running" in out.stdout and "--resume" not in out.stdout
    finally:
        holder.kill()
        holder.wait()
    out = _cli("replay", str(saved), cwd=tmp_path)  # the writer is gone: resume it
    assert "still running" not in out.stdout and "optimize --resume" in out.stdout


def test_tui_unknown_theme_stops_before_a_live_run_is_made(capsys, tmp_path):
    run_dir = tmp_path / "r"
    argv = ["rmsnorm", "--device", "cpu", "--theme", "nosuch", "--run-dir", str(run_dir)]
    assert "unknown theme 'nosuch'" in usage_line(capsys, *argv, entry=tui_cli.main)
    # it left meta.json and an empty log behind: the same command then said
    # "already holds a run (use --resume)" for a run that never started
    assert not run_dir.exists()


def test_tui_replay_pacing_flags_without_a_replay_in_the_app_are_refused(capsys, tmp_path):
    # --speed and --end were read by nothing without --replay (a live run started as if
    # they were not there) and by nothing with --headless
    run_dir = tmp_path / "r"
    argv = ["rmsnorm", "--device", "cpu", "--speed", "4", "--run-dir", str(run_dir)]
    assert "--speed: only with --replay" in usage_line(capsys, *argv, entry=tui_cli.main)
    assert not run_dir.exists()
    line = usage_line(capsys, "--replay", str(CPU_RUN), "--headless", "--end", entry=tui_cli.main)
    assert "--end: not with --headless" in line


def test_a_log_whose_only_line_is_garbage_says_so(capsys, tmp_path):
    # it said only "the log holds no events", as for an empty log
    (tmp_path / "events.jsonl").write_text("garbage{\n")
    for argv, entry in (((str(tmp_path),), tui_cli.main), (("replay", str(tmp_path)), main)):
        argv = ("--replay", *argv) if entry is tui_cli.main else argv
        line = usage_line(capsys, *argv, entry=entry)
        assert "holds no events (its only line is cut short or not an event)" in line


def test_a_proposer_that_cannot_write_stops_before_the_run_exists(capsys, monkeypatch, tmp_path):
    # no key for api, no claude CLI on PATH for code: one line, exit 2, no directory left
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    for proposer, words in (("api", "no Anthropic API key"), ("code", "claude CLI")):
        run_dir = tmp_path / proposer
        line = usage_line(
            capsys, "optimize", "rmsnorm", "--proposer", proposer, "--device", "cpu",
            "--run-dir", str(run_dir),
        )  # fmt: skip
        assert words in line
        assert not run_dir.exists()
    # a resume of a saved api run without the key stops the same way, its log untouched
    saved = tmp_path / "saved"
    shutil.copytree(CPU_RUN, saved)
    meta = json.loads((saved / "meta.json").read_text())
    meta["options"]["proposer"] = "api"
    (saved / "meta.json").write_text(json.dumps(meta))
    before = (saved / "events.jsonl").read_bytes()
    line = usage_line(capsys, "optimize", "--resume", str(saved))
    assert "no Anthropic API key" in line
    assert (saved / "events.jsonl").read_bytes() == before


def test_replay_from_a_run_of_another_op_is_refused(capsys, tmp_path):
    run_dir = tmp_path / "replayed"
    line = usage_line(
        capsys, "optimize", "softmax", "--replay-from", str(CPU_RUN), "--device", "cpu",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    assert "is a run of rmsnorm, not softmax" in line
    assert not run_dir.exists()


def test_a_reader_asking_whether_a_run_is_live_does_not_block_its_writer(tmp_path):
    # writer_active holds a shared lock for an instant; a resume starting in that instant
    # used to say "another process is writing this run"
    import fcntl
    import threading

    from kernelladder.engine.record.log import EventLog, writer_active

    saved = tmp_path / "saved"
    shutil.copytree(CPU_RUN, saved)
    reader = open(saved / "events.jsonl", "rb")  # noqa: SIM115
    fcntl.flock(reader.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # the reader's instant...
    threading.Timer(0.05, reader.close).start()  # ...stretched to 50 ms
    log = EventLog(saved)  # waits the reader out
    try:
        assert writer_active(saved)
    finally:
        log.close()
    assert not writer_active(saved)


# --- --replay-from a damaged log --------------------------------------------------------


def test_replay_from_a_log_with_a_garbage_middle_line_is_one_line(capsys, tmp_path):
    saved = saved_run(tmp_path, "saved")
    insert_line(saved, 3, "this is not json\n")
    log = saved / "events.jsonl"
    new = tmp_path / "new"
    # it used to be read without a word, the damaged line skipped
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--replay-from", str(saved)]
    line = usage_line(capsys, *argv, "--run-dir", str(new))
    assert f"{log}: corrupt line 4 (byte " in line
    assert not new.exists()
    # `kernelladder replay` names the same line of the same file
    assert f"{log}: corrupt line 4 (byte " in usage_line(capsys, "replay", str(saved))


def test_replay_from_a_log_with_a_torn_last_line_still_replays(tmp_path):
    saved = saved_run(tmp_path, "saved")
    whole = ReplayProposer(run_dir=str(saved))
    with open(saved / "events.jsonl", "ab") as f:
        f.write(b'{"kind":"verdict_ready","seq":99,"attem')  # what a kill -9 leaves
    torn = ReplayProposer(run_dir=str(saved))
    assert torn.labels == whole.labels and torn.remaining() == whole.remaining() > 0


# --- --known-hosts that cannot be read --------------------------------------------------


def test_known_hosts_that_is_a_directory_is_refused_with_the_arguments(capsys, tmp_path):
    a_dir = tmp_path / "ssh"
    a_dir.mkdir()
    new = tmp_path / "new"
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--remote", "--ssh-target"]
    argv += ["me@127.0.0.1:9", "--known-hosts", str(a_dir), "--run-dir", str(new)]
    # it used to make the run directory and fail when the runner connected (exit 1)
    line = usage_line(capsys, *argv)
    assert line.endswith(f"--known-hosts: {a_dir} is a directory, not a file")
    assert not new.exists()


def test_a_missing_known_hosts_file_is_still_allowed(tmp_path):
    # missing means "trust nothing"; trusting a key (doctor --trust, the TUI) creates it
    from kernelladder.engine.runners.ssh.config import RemoteSettings, load_remote_config

    absent = tmp_path / "absent"
    settings = RemoteSettings(target="me@127.0.0.1:9", known_hosts=str(absent))
    config = load_remote_config(settings, environ={})
    assert config.hosts[0].known_hosts == absent


# --- --run-dir holding unrelated files --------------------------------------------------


def test_run_dir_holding_unrelated_files_is_refused(capsys, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--run-dir"]
    line = usage_line(capsys, *argv, str(mine))  # it used to write the run in among them
    assert line.endswith(
        f"--run-dir {mine} is not empty and holds no run; pick an empty or new directory, "
        "or --resume a run"
    )
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "mine\n"


def test_run_dir_holding_a_run_still_points_to_resume(capsys, tmp_path):
    saved = saved_run(tmp_path)
    before = (saved / "events.jsonl").read_bytes()
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--run-dir"]
    assert f"use --resume {saved}" in usage_line(capsys, *argv, str(saved))
    assert (saved / "events.jsonl").read_bytes() == before


def test_an_empty_run_dir_is_used(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--branches", "1"]
    assert main([*argv, "--gate", "veto", "--json", "--run-dir", str(empty)]) == 0
    assert (empty / "events.jsonl").is_file() and (empty / "meta.json").is_file()


def test_tui_detach_into_a_directory_that_cannot_be_made_is_one_line(capsys, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for run_dir, why in (("/proc/kl-x", "No such file"), (str(a_file / "run"), "Not a directory")):
        argv = ("rmsnorm", "--device", "cpu", "--detach", "--run-dir", run_dir)
        line = usage_line(capsys, *argv, entry=tui_cli.main)
        assert f"cannot create the run directory {run_dir}" in line and why in line, line
    assert a_file.read_text() == "mine\n"


def test_tui_detach_of_a_run_that_ends_at_once_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    made = tmp_path / "new" / "run"
    for where in ((), ("--run-dir", str(made))):
        proc = subprocess.run(
            [sys.executable, "-m", "kernelladder.cli.tui", "nosuchop", "--detach", *where],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        line = _one_line(proc)
        assert "the background run ended at once" in line and "unknown op 'nosuchop'" in line
        assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
