"""A new runner is one folder of the runners package: its __init__.py declares
`RUNNER = RunnerKind(...)` (its name, its own flag as a row of the run's options, how it
is built), and the registry finds it with nothing listed anywhere else: `--runner toy` is
a choice, `--toy-slots` is in --help, reaches the run's options and the resume rule, and
a run verifies its candidates through the toy runner (the local pool underneath, under
another name: the wiring is what is under test).

The folder is made under tmp_path and added to the runners package's search path in a
fresh interpreter, as tests/ops/test_an_op_is_one_folder.py does for an op; the real
`kernelladder optimize` runs there in-process on the CPU (the real worker, the Triton
interpreter), and the repository is not written to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

INIT = '''\
"""The toy runner: the local worker pool under another name, --toy-slots workers."""

from kernelladder.engine.run.rows import COUNT, RunOption
from kernelladder.engine.runners.kind import RunnerKind


def _make(options, device, per_gpu):
    from kernelladder.engine.runners.toy.runner import ToyRunner  # its heavy part, on use

    return ToyRunner(device=device, slots=options.toy_slots, per_gpu=per_gpu)


RUNNER = RunnerKind(
    name="toy",
    make=_make,
    rows=(RunOption("toy_slots", "--toy-slots", "toy: N local workers", reads=COUNT,
                    metavar="N", resumable=True),),
    summary="the toy runner",
)
'''

RUNNER = """\
from kernelladder.engine.runners.local import LocalRunner


class ToyRunner(LocalRunner):
    name = "toy"
"""

PROBE = r"""
import contextlib, io, json, sys
import kernelladder.engine.runners as runners
runners.__path__.append(sys.argv[1])
run_dir = sys.argv[2]

from kernelladder.cli import build_parser, main
from kernelladder.engine import RESUMABLE_OPTIONS, RUNNER_KINDS, read_events

def cli(*words):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(words))
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()

sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
first = cli("optimize", "rmsnorm", "--device", "cpu", "--runner", "toy", "--toy-slots", "2",
            "--max-attempts", "2", "--branches", "1", "--no-confirm", "--keep-workers", "0",
            "--run-dir", run_dir)
alone = cli("optimize", "rmsnorm", "--device", "cpu", "--toy-slots", "2",
            "--run-dir", run_dir + "-alone")
moved = cli("optimize", "--resume", run_dir, "--runner", "local")
resumed = cli("optimize", "--resume", run_dir, "--toy-slots", "1", "--max-attempts", "3")
events = [e.to_dict() for e in read_events(run_dir)]
print(json.dumps({
    "kinds": [k.name for k in RUNNER_KINDS],
    "toy_file": sys.modules["kernelladder.engine.runners.toy"].__file__,
    "help": sub.choices["optimize"].format_help(),
    "resumable": "toy_slots" in RESUMABLE_OPTIONS,
    "first": first, "alone": alone, "moved": moved, "resumed": resumed,
    "meta": json.load(open(run_dir + "/meta.json"))["options"],
    "events": events,
}))
"""


def _git_status() -> str:
    """The package's and the docs' changes, as git sees them (the test adds none)."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", "kernelladder", "docs"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout


def test_a_new_runner_folder_is_found_and_verifies_a_run_without_being_listed(tmp_path: Path):
    folder = tmp_path / "runners" / "toy"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(INIT)
    (folder / "runner.py").write_text(RUNNER)
    before = _git_status()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder.parent), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])

    # found, after the built-in ones, from its own folder; nothing in the tree was written
    assert found["kinds"] == ["ssh", "ray", "toy"]
    assert found["toy_file"] == str(folder / "__init__.py")
    assert _git_status() == before
    # its choice and its flag are on the command line, its flag in the resume rule
    assert "{local,ray,toy}" in found["help"]
    assert "--toy-slots N" in found["help"] and "toy: N local workers" in found["help"]
    assert found["resumable"]

    # the run was verified through it, with its flag's value (two workers), both recorded
    assert found["first"][0] == 0, found["first"][1][-2000:]
    events = found["events"]
    reopened = next(i for i, e in enumerate(events) if e["kind"] == "run_reopened")
    opened = events[0]
    assert opened["kind"] == "run_started" and opened["runner"] == "toy"
    assert (opened["settings"]["runner"], opened["settings"]["toy_slots"]) == ("toy", 2)
    started = [e for e in events if e["kind"] == "attempt_started"]
    assert {e["runner"] for e in started} == {"toy"}
    assert [e["slot"] for e in started if e["seq"] < events[reopened]["seq"]] == ["cpu:0", "cpu:1"]

    # its flag without it is refused, not ignored
    assert found["alone"] == [2, "kernelladder: error: --toy-slots goes with --runner toy\n"]
    assert not (tmp_path / "run-alone").exists()

    # a resume stays on it: --runner local is refused in one line; --toy-slots changes,
    # recorded, and the toy runner is built again from the record, now with one worker
    code, err = found["moved"]
    assert code == 2
    assert err.strip().splitlines() == [
        "kernelladder: error: --runner local cannot change on resume (the run was on toy)"
    ]
    assert found["resumed"][0] == 0, found["resumed"][1][-2000:]
    assert events[reopened]["settings"] == {"max_attempts": 3, "toy_slots": 1}
    assert [e["slot"] for e in started if e["seq"] > events[reopened]["seq"]] == ["cpu:0"]
    assert (found["meta"]["runner"], found["meta"]["toy_slots"]) == ("toy", 1)
