"""Building a run: a new one (create_run) or a killed or stopped one continued
(resume_run), with the default runner, proposer and device when none is given."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import Proposer, Runner
from kernelladder.engine.record.log import LogError, read_log, read_meta, repair_tail
from kernelladder.engine.run.op_info import OpInfo, load_op_info
from kernelladder.engine.run.options import RESUMABLE_OPTIONS, RunOptions, flag_of
from kernelladder.engine.run.run import Run


def new_run_id(op_name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", op_name).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def _default_runner(options: RunOptions, device: str) -> Runner:
    from kernelladder.engine.runners import make_runner

    return make_runner(options, device)


def _default_proposer(options: RunOptions) -> Proposer:
    from kernelladder.engine.proposers import get_proposer

    cfg: dict[str, Any] = {}
    if options.model:
        cfg["model"] = options.model
    if options.replay_from:
        cfg["replay_from"] = options.replay_from
    for name in ("base_url", "price_in", "price_out"):  # the openai proposer's
        if getattr(options, name, None) is not None:
            cfg[name] = getattr(options, name)
    if options.request_timeout_s is not None:  # the model proposers' (api, openai, code)
        cfg["timeout_s"] = options.request_timeout_s
    return get_proposer(options.proposer, **cfg)


def _check_ready(proposer: Proposer) -> None:
    """A proposer that cannot write anything here (the api one without a key, the code
    one without its CLI) raises its ProposerError now, before the run's directory is made
    or its log touched (ProposerBase's default: ready at once)."""
    proposer.check_ready()


def create_run(
    options: RunOptions,
    runner: Runner | None = None,
    proposer: Proposer | None = None,
    *,
    op: OpInfo | None = None,
    notices: Sequence[str] = (),
    gate_policy: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Run:
    """A new run in options.run_dir (default runs/<id>). Builds the local (or SSH) runner
    and the proposer when not given. Raises OpLoadError / ProposerError / ValueError with
    one line for bad input. `gate_policy`: this session's policy when it is not
    options.gate (which is what is saved), e.g. veto when no one can answer ask-gates."""
    info = op or load_op_info(options.op, options.start)
    from kernelladder.engine.runners import default_device

    device = default_device(options)
    options = replace(options, device=device)
    run_id = new_run_id(info.name)
    run_dir = Path(options.run_dir) if options.run_dir else Path("runs") / run_id
    if (run_dir / "events.jsonl").exists():
        raise ValueError(f"{run_dir} already holds a run (use --resume {run_dir})")
    options = replace(options, run_dir=str(run_dir))
    proposer = proposer or _default_proposer(options)
    # a proposer that cannot work on this op says so now, before any worker starts
    proposer.strategies(info.description, options.branches)
    _check_ready(proposer)
    runner = runner or _default_runner(options, device)
    return Run(
        options, run_dir=run_dir, op=info, runner=runner, proposer=proposer, run_id=run_id,
        notices=notices, gate_policy=gate_policy, clock=clock,
    )  # fmt: skip


def resume_run(
    run_dir: str | Path,
    runner: Runner | None = None,
    proposer: Proposer | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    notices: Sequence[str] = (),
    gate_policy: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Run:
    """Continue a killed or stopped run: a torn last line is cut, the log is folded,
    attempts left without a verdict are re-run under their own numbers, numbering goes
    on without reuse. `overrides` may change RESUMABLE_OPTIONS (recorded in RunReopened
    and saved); `gate_policy` is this session's only, as in create_run."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    try:
        options = RunOptions.from_dict(meta["options"])
        info = OpInfo.from_dict(meta["op"])
    except (KeyError, TypeError) as exc:
        raise LogError(f"{run_dir}: meta.json is incomplete ({exc})") from None
    changed = {}
    for key, value in (overrides or {}).items():
        if key not in RESUMABLE_OPTIONS:
            raise ValueError(f"{flag_of(key)} cannot change on resume")
        if getattr(options, key) != value:
            changed[key] = value
    options = replace(options, run_dir=str(run_dir), **changed)
    read_log(run_dir)  # a corrupt middle line stops here with LogError, before any change
    proposer = proposer or _default_proposer(options)
    _check_ready(proposer)  # no key, no CLI: stops here too
    repaired = repair_tail(run_dir)
    runner = runner or _default_runner(options, options.device or "cpu")
    run = Run(
        options, run_dir=run_dir, op=info, runner=runner, proposer=proposer,
        run_id=meta.get("run_id"), resumed=True, repaired_tail=repaired, overrides=changed,
        notices=notices, gate_policy=gate_policy, clock=clock,
    )  # fmt: skip
    if run._resumed:
        run.log.write_meta(
            {"run_id": run.run_id, "options": options.to_dict(), "op": info.to_dict()}
        )
    return run
