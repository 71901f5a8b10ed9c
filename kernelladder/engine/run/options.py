"""The options of a run, each declared once in RUN_OPTIONS: its RunOptions field and
default, its flag, help and how the flag's text is read, whether a resume may change it
and which commands take it. RunOptions, the command line of `kernelladder optimize`,
`kernelladder-tui` and `kernelladder serve` (cli/run_arguments.py), the resume rule
(RESUMABLE_OPTIONS) and docs/CLI.md are all read from it. Plain data: no argparse here.

RUN_OPTIONS is the run's own rows (OWN_OPTIONS, below) and then each runner's, declared in
its folder (runners/NAME/__init__.py) and found by runners/registry.py with --runner's
row; a row is a RunOption (run/rows.py)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any

from kernelladder.engine.proposers import PROPOSERS
from kernelladder.engine.run.rows import (  # noqa: F401 (handed on: the rows' vocabulary)
    COUNT,
    FILE,
    INTEGER,
    NON_NEGATIVE,
    OFF,
    ON,
    OPTIMIZE,
    POSITIVE,
    RUN_COMMANDS,
    SERVE,
    TEXT,
    TUI,
    Reading,
    RunOption,
)
from kernelladder.engine.runners.registry import runner_rows, verifies_elsewhere

MAX_DEFAULT_WORKERS_PER_GPU = 3
VERIFY_MODES = ("pipelined", "serial")
GATE_CHOICES = ("ask", "approve", "veto")
# local runs: how long idle verifier workers are kept warm for the next run (verifier/
# keeper.py) when --keep-workers is not given: this variable, else the default on a GPU
KEEP_WORKERS_ENV = "KERNELLADDER_KEEP_WORKERS"
DEFAULT_KEEP_WORKERS_S = 600.0

# the run's own options; the runners' (runners/NAME/__init__.py) follow them in RUN_OPTIONS
OWN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("op", None, "built-in op or problem file", default=MISSING,
              metavar="OP|PROBLEM.py"),
    RunOption("proposer", "--proposer", "who writes candidates (default: {default}, offline; "
              "tune for a workspace without an API key)", default="search", choices=PROPOSERS),
    RunOption("start", "--start", "your own starting kernel: verified first as attempt #0, "
              "every branch starts from it", metavar="FILE"),
    RunOption("profile", "--profile", "Nsight Compute profiles of the start and each new "
              "best (auto: when ncu can read the GPU's counters)", default="auto",
              choices=("auto", "off")),
    RunOption("model", "--model", "model for the api/code/openai proposers"),
    RunOption("base_url", "--base-url", "openai: an OpenAI-compatible server, e.g. "
              "http://127.0.0.1:8000/v1 for vLLM (default: OPENAI_BASE_URL, else OpenAI's; key "
              "from OPENAI_API_KEY)", metavar="URL", resumable=True),
    RunOption("request_timeout_s", "--request-timeout", "api/openai/code: seconds one request "
              "to the model may take before it is retried (default 300; code: 900)",
              reads=POSITIVE, metavar="S", resumable=True),
    *(RunOption(f"price_{side}", f"--price-{side}", f"openai: USD per million {side}put tokens "
                "(both given: they price every call; else a small table of OpenAI's models, "
                "else the cost is not known)", reads=NON_NEGATIVE, metavar="USD")
      for side in ("in", "out")),
    RunOption("target", "--target", "stop once the best reaches this speedup over the "
              "fastest library baseline (geomean over the shapes; see --target-over)",
              reads=POSITIVE, resumable=True),
    RunOption("target_over", "--target-over", "what --target is a speedup over: best "
              "(default: the fastest library baseline per shape) or reference (the op's "
              "reference)", default="best", choices=("best", "reference"), resumable=True),
    RunOption("confirm", "--no-confirm", "do not re-measure the best against the fastest "
              "baseline when the run ends", default=True, reads=OFF, resumable=True),
    RunOption("verify", "--verify", "pipelined (default): each GPU's workers compile the next "
              "candidates while one is timed, correctness shares the GPU and timing has it "
              "alone; serial: one worker per GPU takes each candidate start to finish",
              default="pipelined", choices=VERIFY_MODES, resumable=True),
    RunOption("workers_per_gpu", "--workers-per-gpu", "pipelined: workers sharing each GPU "
              "(default one per branch, at most 3)", reads=COUNT, resumable=True),
    RunOption("keep_workers_s", "--keep-workers", "local runs: keep the idle verifier workers "
              "warm S seconds after the run, for the next run here to take (default "
              f"{DEFAULT_KEEP_WORKERS_S:g} on a GPU, off on the CPU, or {KEEP_WORKERS_ENV}; 0: "
              "shut them down; `doctor --stop-workers` stops them)", reads=NON_NEGATIVE,
              metavar="S", resumable=True),
    RunOption("early_stop", "--no-early-stop", "time every candidate in full, also one "
              "clearly slower than its branch's best after a first look (by default that one "
              "stops early: a pass with coarse times)", default=True, reads=OFF, resumable=True),
    RunOption("max_attempts", "--max-attempts", "attempts for the whole run (default "
              "{default})", default=40, reads=COUNT, resumable=True),
    RunOption("branches", "--branches", "strategy branches at once (default {default})",
              default=3, reads=COUNT),
    RunOption("stagnation", "--stagnation", "attempts without a gain before a branch stops "
              "(default {default}; off for --proposer tune)", default=8, reads=COUNT,
              resumable=True, may_be_off=True),
    RunOption("budget_usd", "--budget-usd", "spend at most this", reads=NON_NEGATIVE,
              resumable=True),
    RunOption("budget_tokens", "--budget-tokens", "use at most N tokens (input + output): the "
              "budget of a model whose cost is not known", reads=COUNT, metavar="N",
              resumable=True),
    RunOption("time_limit_s", "--time-limit", "wall-clock budget in seconds", reads=POSITIVE,
              metavar="S", resumable=True),
    RunOption("hints", "--hints", "global hints for proposers", default="", reads=FILE,
              metavar="FILE", resumable=True),
    RunOption("gate", "--gate", "what happens to high-undo-cost moves (default {default})",
              default="ask", choices=GATE_CHOICES, resumable=True),
    RunOption("gate_timeout_s", "--gate-timeout", "after S seconds an unanswered gate applies "
              "--gate-timeout-policy", reads=POSITIVE, metavar="S", resumable=True),
    RunOption("gate_timeout_policy", "--gate-timeout-policy", "decision when a gate times out "
              "(default {default})", default="veto", choices=("approve", "veto"),
              resumable=True),
    RunOption("run_dir", "--run-dir", "default runs/<id>", metavar="DIR"),
    RunOption(None, "--resume", "continue a stopped or killed run", metavar="DIR"),
    RunOption("device", "--device", "default: cuda when available", choices=("cuda", "cpu")),
    RunOption("timeout_s", "--timeout", "per-candidate verifier timeout (default {default})",
              default=300.0, reads=POSITIVE, metavar="S", resumable=True),
    # 0 in a run, so a correct kernel slower than the reference is a step whose standing
    # says so (`check` keeps 1.0)
    RunOption("min_speedup", "--min-speedup", "speed gate threshold over the reference "
              "(default {default}: a correct kernel slower than the reference passes, its "
              "standing says so)", default=0.0, reads=NON_NEGATIVE),
    RunOption("replay_from", "--replay-from", "proposer replay: the run whose sources to "
              "re-propose", metavar="DIR"),
)  # fmt: skip
RUN_OPTIONS: tuple[RunOption, ...] = (*OWN_OPTIONS, *runner_rows())

OPTION_OF_FIELD = {o.field: o for o in RUN_OPTIONS if o.field is not None}
# what a resume may change (budgets and policies; never the op, device or proposer)
RESUMABLE_OPTIONS = tuple(o.field for o in RUN_OPTIONS if o.resumable and o.field)


def run_options(command: str) -> Iterator[RunOption]:
    """The options `command` takes, in the order its --help lists them."""
    return (o for o in RUN_OPTIONS if command in o.commands)


def flag_of(name: str) -> str:
    """The flag that sets a RunOptions field, for messages (--time-limit for time_limit_s)."""
    option = OPTION_OF_FIELD.get(name)
    return option.flag if option is not None and option.flag else f"--{name.replace('_', '-')}"


def _declared(cls: type) -> type:
    """`cls` as a frozen dataclass with one field per option of RUN_OPTIONS."""
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    for option in RUN_OPTIONS:
        if option.field is None:
            continue
        kind = option.reads.type
        none = option.default is None or option.may_be_off
        annotations[option.field] = f"{kind} | None" if none else kind
        if option.default is MISSING:
            continue
        if callable(option.default):  # a mutable default: a fresh one per instance
            setattr(cls, option.field, field(default_factory=option.default))
        else:
            setattr(cls, option.field, option.default)
    cls.__annotations__ = annotations
    return dataclass(frozen=True)(cls)


@_declared
class RunOptions:
    """The options of a run: one field per option declared in RUN_OPTIONS, with its
    default (`op` first, the only one without)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def pipelined(self) -> bool:
        return self.verify == "pipelined"

    def worker_count(self) -> int:
        """Workers per GPU: one when serial; pipelined, one per branch (at most 3): a
        branch has one attempt in flight, and three keep one GPU's timing busy."""
        if not self.pipelined:
            return 1
        if self.workers_per_gpu is not None:
            return max(1, self.workers_per_gpu)
        return max(1, min(MAX_DEFAULT_WORKERS_PER_GPU, self.branches))

    def keep_workers_seconds(self, device: str, environ: Mapping[str, str] | None = None) -> float:
        """How long this run's idle local workers are kept after it: --keep-workers, else
        KERNELLADDER_KEEP_WORKERS, else 600 s on a GPU; 0 (off) on the CPU, whose runs the
        test suite starts by the hundred, and for a runner that verifies elsewhere (SSH,
        Ray: their workers are not on this machine). ValueError for a variable that is not
        a number of seconds."""
        if verifies_elsewhere(self):
            return 0.0
        if self.keep_workers_s is not None:
            return max(0.0, float(self.keep_workers_s))
        raw = (os.environ if environ is None else environ).get(KEEP_WORKERS_ENV, "").strip()
        if not raw:
            return DEFAULT_KEEP_WORKERS_S if device == "cuda" else 0.0
        if raw.lower() in ("off", "no", "false"):
            return 0.0
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(
                f"{KEEP_WORKERS_ENV}={raw!r}: not a number of seconds (0 turns keeping off)"
            )
        return seconds

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOptions:
        known = {k: v for k, v in d.items() if k in OPTION_OF_FIELD}
        # runs older than vs best recorded neither: their target and gate meant the reference
        known.setdefault("target_over", "reference")
        known.setdefault("min_speedup", 1.0)
        return cls(**known)


def unattended_gate_policy(options: RunOptions) -> tuple[str, str]:
    """The gate policy for a session in which no one can answer an ask-gate, and why
    (one line; empty when options.gate is not "ask"). Applies to that session only:
    options.gate stays the person's choice, so a later session that can ask, asks.
    An ask-gate would go unanswered until its timeout, so a given --gate-timeout's
    policy applies at once; without a timeout it is veto (nothing risky runs unseen)."""
    if options.gate != "ask":
        return options.gate, ""
    if options.gate_timeout_s is not None:
        policy = options.gate_timeout_policy
        because = f"--gate-timeout-policy {policy} applies at once"
    else:
        policy, because = "veto", "using the veto policy"
    return policy, f"--gate ask needs a terminal on stdin to ask; {because} (this session only)"
