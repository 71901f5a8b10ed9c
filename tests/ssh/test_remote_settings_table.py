"""One description of the remote settings (REMOTE_SETTINGS) drives the command-line
options, the environment names, the messages and what a run records; a run recorded
before the table (argparse names in remote_config) still resumes with the same settings."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from helpers import ROOT

from kernelladder.cli import UsageError
from kernelladder.cli.common import (
    add_remote_arguments,
    load_remote,
    remote_options,
    remote_requested,
    remote_settings,
)
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners.ssh.config import (
    ENV_NAMES,
    OPTION_NAMES,
    REMOTE_SETTINGS,
    RemoteSettings,
    settings_from_record,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_remote_arguments(parser)
    return parser.parse_args(list(argv))


def test_every_remote_setting_is_one_row_with_its_option_and_environment_name():
    fields = [f.name for f in dataclasses.fields(RemoteSettings)]
    assert [s.field for s in REMOTE_SETTINGS] == fields
    for s in REMOTE_SETTINGS:
        if s.env:
            assert ENV_NAMES[s.field] == s.env and OPTION_NAMES[s.field] == s.flag
            assert f"env {s.env}" in s.help
    assert "gpus" not in ENV_NAMES  # --gpus picks the GPUs of one --ssh-target only
    parser = argparse.ArgumentParser()
    add_remote_arguments(parser)
    flags = {o for a in parser._actions for o in a.option_strings}
    assert {s.flag for s in REMOTE_SETTINGS} <= flags


def test_a_run_records_settings_by_field_and_reads_them_back():
    args = parse("--ssh-target", "me@box:2222", "--remote-python", "/opt/py", "--gpus", "0,1")
    assert remote_requested(args)
    recorded = remote_options(args)
    assert recorded == {"target": "me@box:2222", "python": "/opt/py", "gpus": "0,1"}
    options = RunOptions.from_dict(RunOptions(op="rmsnorm", remote_config=recorded).to_dict())
    assert settings_from_record(options.remote_config) == remote_settings(args)


def test_a_run_recorded_with_argparse_names_resumes_with_the_same_settings():
    old = {"ssh_target": "me@box", "remote_python": "/opt/py", "remote_gpus": "1"}
    assert settings_from_record(old) == RemoteSettings(target="me@box", python="/opt/py", gpus="1")


def test_a_bad_setting_is_named_by_the_option_it_came_from(monkeypatch):
    for env in ENV_NAMES.values():
        monkeypatch.delenv(env, raising=False)
    with pytest.raises(UsageError, match="--remote-python"):
        load_remote(parse("--ssh-target", "me@box", "--remote-python", "py; rm -rf /"))
    monkeypatch.setenv("KL_REMOTE_PYTHON", "py; rm -rf /")
    with pytest.raises(UsageError, match="KL_REMOTE_PYTHON"):
        load_remote(parse("--ssh-target", "me@box"))


def test_the_remote_setup_guide_lists_every_setting():
    guide = (ROOT / "REMOTE_SETUP.md").read_text(encoding="utf-8")
    for s in REMOTE_SETTINGS:
        env = f" `{s.env}` " if s.env else " "
        assert f"|{env}| `{s.flag}` |" in guide, s.flag
