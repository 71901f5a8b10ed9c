"""The engine's one door: create, resume and replay a run, its options, its events and
record, steering it, and the runners and proposers it is built with. Code outside the
engine imports from here alone (tests/test_layers.py holds it).

A name is imported on first use, from the module the table below names, so a light
command pays only for what it uses: asyncssh, anthropic or torch come only with
the runner or proposer that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

# modules handed out whole: `from kernelladder.engine import events as ev`
_MODULES: dict[str, str] = {
    "events": "record.events",
    "state": "record.state",
    "ray_cluster": "runners.ray.cluster",
}

# name -> the module under kernelladder.engine that defines it ("module:attr" when the
# name there differs)
_NAMES: dict[str, str] = {
    # a run: create, resume, describe
    "create_run": "run.setup",
    "resume_run": "run.setup",
    "new_run_id": "run.setup",
    "RESUMABLE_OPTIONS": "run.setup",
    "Run": "run.run",
    "OpInfo": "run.op_info",
    "load_op_info": "run.op_info",
    "one_line": "run.lines",
    "verdict_line": "run.lines",
    "GATE": "run.verification",
    # the options
    "RunOptions": "run.options",
    "DEFAULT_KEEP_WORKERS_S": "run.options",
    "KEEP_WORKERS_ENV": "run.options",
    "unattended_gate_policy": "run.options",
    "RunOption": "run.options",
    "RUN_OPTIONS": "run.options",
    "run_options": "run.options",
    "OPTION_OF_FIELD": "run.options",
    # the commands a run option belongs to
    **dict.fromkeys(("OPTIMIZE", "SERVE", "TUI"), "run.options"),
    "REMOTE": "runners.ssh",  # the SSH settings' section of --help
    # the record: events, the log, the fold, summaries
    "Event": "record.events",
    "RunFinished": "record.events",
    "event_from_dict": "record.events",
    "ATTEMPTS_DIR": "record.log",
    "EVENTS_FILE": "record.log",
    "META_FILE": "record.log",
    "EventLog": "record.log",
    "LogError": "record.log",
    "read_attempt_source": "record.log",
    "read_attempt_verdict": "record.log",
    "read_events": "record.log",
    "read_log": "record.log",
    "read_meta": "record.log",
    "writer_active": "record.log",
    "RunState": "record.state",
    "Attempt": "record.state_model",
    "AttemptStatus": "record.state_model",
    "BranchStatus": "record.state_model",
    "apply": "record.state",
    "closest_to_holding": "record.state",
    "fold": "record.state",
    "new_state": "record.state",
    "summarize": "record.summary",
    "fill_standing": "record.standing_backfill",
    "best_baseline_name": "record.standing_rank",
    "judged_rows": "record.standing_rank",
    "merit_from_timings": "record.standing_rank",
    "ranking_noise": "record.standing_rank",
    "standing_counts": "record.standing_rank",
    "standing_shapes": "record.standing_rank",
    # steering a run, attaching to one
    "AttachError": "run.control",
    "ControlClient": "run.control",
    "DETACHED_LOG": "run.control",
    "Owner": "run.control",
    "STEERING_COMMANDS": "run.control",
    "live_owner": "run.control",
    "read_owner": "run.control",
    "deploy_event": "run.commands",
    "DIRECTIVE_SYNTAX": "run.directives:SYNTAX",
    "directive_lines": "run.directives",
    "op_vocabulary": "run.hints",
    "read_hints": "run.hints",
    "refusal": "run.hints",
    # the seams, who proposes
    "ProposerError": "protocols",
    "RunnerLost": "protocols",
    "VerifyRequest": "protocols",
    "SEARCH": "proposers.search:NAME",
    "list_models": "proposers.openai_chat",
    "price_of": "proposers.openai_chat",
    "find_knobs": "proposers.tune.knobs:find",
    "with_config": "proposers.tune.knobs",
    "TuneSpace": "proposers.tune.space:Space",
    # where candidates are verified
    "LocalRunner": "runners.local",
    "default_device": "runners.local",
    "start_workers_ahead": "runners.local",
    "RunnerKind": "runners.kind",
    "RUNNER_KINDS": "runners.registry:KINDS",
    "chosen_kind": "runners.registry",
    "chosen_kinds": "runners.registry",
    "verifies_elsewhere": "runners.registry",
    "MISSING_RAY": "runners.ray.cluster",
    "ray_installed": "runners.ray.cluster",
    "resolve_address": "runners.ray.cluster",
    "REMOTE_SETTINGS": "runners.ssh.config",
    "RemoteConfigError": "runners.ssh.config",
    "RemoteSettings": "runners.ssh.config",
    "load_remote_config": "runners.ssh.config",
    "physical_gpus": "runners.ssh.config",
    "HostKeyError": "runners.ssh.link",
    "HostLink": "runners.ssh.link",
    "RemoteError": "runners.ssh.link",
    "python_command": "runners.ssh.link",
    "trust_host_key": "runners.ssh.link",
    "make_remote_runner": "runners.ssh.pool",
}

__all__ = sorted([*_MODULES, *_NAMES])


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value: Any = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    elif name in _NAMES:
        module, _, attr = _NAMES[name].partition(":")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr or name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once looked up, an attribute like any other
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
