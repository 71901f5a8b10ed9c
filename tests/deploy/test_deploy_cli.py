"""`kernelladder deploy`: a run's best into a model, the result recorded in the run (so
`replay` and `replay --json` show it), exit codes, one line for bad input, one line
telling how to install transformers when it is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from helpers import ROOT, saved_run, usage_line  # noqa: E402

from kernelladder.cli import main  # noqa: E402
from kernelladder.engine.record.events import DeployChecked  # noqa: E402
from kernelladder.engine.record.log import read_events  # noqa: E402

RMSNORM = str(ROOT / "kernelladder" / "ops" / "rmsnorm" / "start.py")
FAST = ["--prompt", "8", "--new-tokens", "4"]


def test_deploy_run_dir_alone_checks_the_best_and_records_it_for_replay(tmp_path, capsys):
    run = saved_run(tmp_path)
    before = read_events(run)
    main(["replay", str(run), "--json"])
    summary_before = json.loads(capsys.readouterr().out)
    assert main(["deploy", str(run), *FAST]) == 0
    out = capsys.readouterr().out
    assert "deploy rmsnorm #1, the run's best (not re-measured) into llama-3-8b (tiny" in out
    assert "check: MATCH" in out and "speed: not measured: no GPU" in out
    assert f"recorded: event #{len(before)} appended to the log" in out
    events = read_events(run)
    assert len(events) == len(before) + 1
    deploy = events[-1]
    assert isinstance(deploy, DeployChecked)
    assert (deploy.attempt, deploy.op, deploy.model, deploy.status) == (
        1,
        "rmsnorm",
        "llama-3-8b",
        "match",
    )
    assert deploy.result["workload"]["prompt"] == 8

    main(["replay", str(run), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["deploys"][0]["summary"] == deploy.summary
    # a deploy beside a finished run changes nothing of the run's own record
    assert summary["elapsed_s"] == summary_before["elapsed_s"] and summary["finished"]
    assert {k: v for k, v in summary.items() if k not in ("deploys", "events")} == {
        k: v for k, v in summary_before.items() if k != "events"
    }
    main(["replay", str(run)])
    text = capsys.readouterr().out
    assert f"deploy recorded as event #{deploy.seq}: match" in text
    assert "the run did not finish" not in text


def test_deploy_json_and_one_attempt_and_no_record(tmp_path, capsys):
    run = saved_run(tmp_path)
    count = len(read_events(run))
    assert main(["deploy", str(run), "--attempt", "3", "--json", "--no-record", *FAST]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["attempt"] == 3 and result["kernel"] == "#3, passed"
    assert result["status"] == "match" and "recorded" not in result
    assert len(read_events(run)) == count


def test_a_kernel_file_that_does_not_match_exits_1(tmp_path, capsys):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(Path(RMSNORM).read_text().replace("y = (x * inv) * w", "y = x * inv"))
    code = main(["deploy", "--kernel", str(wrong), "--op", "rmsnorm", "--json", *FAST])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["status"] == "mismatch"
    assert result["check"]["failure"]["site"] == "model.layers.0.input_layernorm"


@pytest.mark.parametrize(
    "argv, line",
    [
        ([], "give RUN_DIR (a run's directory) or --kernel FILE --op OP"),
        (["--kernel", RMSNORM], "--kernel FILE needs --op OP"),
        (["--kernel", RMSNORM, "--op", "rmsnorm", "--model", "llama-9"], "unknown model 'llama-9'"),
        (["--kernel", RMSNORM, "--op", "rmsnorm", "--batch", "0"], "--batch must be at least 1, not 0"),
        (["--kernel", RMSNORM, "--op", "no_such_op"], "unknown op 'no_such_op'"),
        (["--kernel", "missing.py", "--op", "rmsnorm"], "kernel file not found: missing.py"),
        (["--kernel", RMSNORM, "--op", "rmsnorm", "--model", "gpt2", "--prompt", "1020"],
         "prompt 1020 + 8 new tokens exceed gpt2's 1024 positions"),
        (["examples/cpu-rmsnorm-run", "--attempt", "99"], "no attempt #99"),
        (["no/such/run"], "no events.jsonl (not a run directory)"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(argv, line, capsys, tmp_path):
    got = usage_line(capsys, "deploy", *argv)
    assert got.startswith("kernelladder: error: ") and line in got


def test_a_missing_transformers_says_how_to_install_the_extra_in_one_line():
    # transformers hidden from the child (a None in sys.modules makes its import fail)
    script = (
        "import sys; sys.modules['transformers'] = None\n"
        "from kernelladder.cli import main\n"
        f"sys.exit(main(['deploy', '--kernel', {RMSNORM!r}, '--op', 'rmsnorm']))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "kernelladder: error: kernelladder deploy needs the transformers library: "
        "pip install -e '.[deploy]' (or: pip install transformers)"
    ]


def test_a_transformers_older_than_5_says_so_in_one_line():
    # an old install stood in for by a module object carrying only its version
    script = (
        "import sys, types\n"
        "sys.modules['transformers'] = types.SimpleNamespace(__version__='4.57.1')\n"
        "from kernelladder.cli import main\n"
        f"sys.exit(main(['deploy', '--kernel', {RMSNORM!r}, '--op', 'rmsnorm']))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs transformers 5.0 or newer, this is 4.57.1" in lines[0]
