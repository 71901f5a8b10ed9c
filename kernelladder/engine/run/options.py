"""The options of a run, shared by `kernelladder optimize`, `kernelladder-tui` and resume."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_DEFAULT_WORKERS_PER_GPU = 3
VERIFY_MODES = ("pipelined", "serial")
# local runs: how long idle verifier workers are kept warm for the next run (verifier/
# keeper.py) when --keep-workers is not given: this variable, else the default on a GPU
KEEP_WORKERS_ENV = "KERNELLADDER_KEEP_WORKERS"
DEFAULT_KEEP_WORKERS_S = 600.0


@dataclass(frozen=True)
class RunOptions:
    op: str  # built-in op name, or a path to a KernelBench-format problem file
    proposer: str = "search"  # "search" | "tune" | "api" | "openai" | "code" | "replay"
    model: str | None = None  # api/code/openai: the model; None: the proposer's default
    base_url: str | None = None  # openai: the server (None: the SDK's default, OpenAI)
    price_in: float | None = None  # openai: USD per million input tokens (None: its table)
    price_out: float | None = None  # openai: USD per million output tokens
    # api/openai/code: seconds one request to the model may take (None: the proposer's
    # default, api.DEFAULT_REQUEST_TIMEOUT_S; code: its own)
    request_timeout_s: float | None = None
    target: float | None = None  # stop a branch (and the run) once this speedup is reached
    # what the target is a speedup over: "best" (the fastest library baseline per shape,
    # geomean) or "reference" (the op's reference)
    target_over: str = "best"
    max_attempts: int = 40  # for the whole run
    branches: int = 3  # K branches at once (bounded by runner slots)
    # attempts without a gain beyond noise before a branch stops; None: off (the tune
    # proposer's default: its branches end when its space is spent or the budget is)
    stagnation: int | None = 8
    budget_usd: float | None = None
    budget_tokens: int | None = None  # input + output tokens (a model whose cost is not known)
    time_limit_s: float | None = None
    hints: str = ""  # global hints (from --hints FILE)
    gate: str = "ask"  # "ask" | "approve" | "veto"
    gate_timeout_s: float | None = None  # after this, the policy (approve/veto) applies
    gate_timeout_policy: str = "veto"
    run_dir: str | None = None  # default: runs/<id>
    device: str | None = None  # "cuda" | "cpu"; None: cuda when available
    timeout_s: float = 300.0  # per-candidate verifier timeout
    # the speed gate's threshold over the reference: 0 in a run, so a correct kernel slower
    # than the reference is a step whose standing says so (`check` keeps 1.0)
    min_speedup: float = 0.0
    confirm: bool = True  # re-measure the best at the end (GPU only)
    replay_from: str | None = None  # proposer "replay": the run dir whose sources to re-propose
    start: str | None = None  # a file with the user's own starting kernel (attempt #0)
    profile: str = "auto"  # "auto": Nsight Compute profiles when ncu can read counters; "off"
    remote: bool = False  # verify over SSH (engine/runners/ssh/)
    # the remote settings given, keyed by RemoteSettings field (runners/ssh/config.py)
    remote_config: dict[str, Any] = field(default_factory=dict)

    # how candidates are verified: "pipelined" (compile ahead while another times; GPU
    # shared for correctness, to itself for timing) or "serial" (one worker per GPU, each
    # candidate start to finish, as before)
    verify: str = "pipelined"
    workers_per_gpu: int | None = None  # pipelined: None = one per branch, at most 3
    early_stop: bool = True  # stop timing a candidate clearly slower than its branch's best

    ray_address: str | None = None  # verify on a Ray cluster: "auto", "local", HOST:PORT
    ray_slots: int | None = None  # Ray: CPU actors (device cpu) or at most N GPU actors
    # local runs: seconds the idle workers are kept warm after the run for the next one
    # (0: shut down as before); None: KEEP_WORKERS_ENV, else 600 on a GPU and 0 on the CPU
    keep_workers_s: float | None = None

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
        test suite starts by the hundred, and for SSH and Ray runs (their workers are
        not on this machine). ValueError for a variable that is not a number of seconds."""
        if self.remote or self.ray_address is not None:
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
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
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
