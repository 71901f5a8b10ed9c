"""Nsight Compute profiles of one candidate, in a separate process.

ncu cannot attach to the long-lived verifier worker, so a profile is a fresh process:

    ncu --profile-from-start off --section SpeedOfLight ... --launch-count 1 \\
        --kernel-name regex:^(KERNEL)$ -f -o RUN/profiles/<n> \\
        python3 -m kernelladder.verifier.worker.profile_driver drive OP.json CANDIDATE.py

Only the sections the summary, the Profile tab and the prompts read are collected
(SECTIONS, the L2 hit rate and the warp-stall ratios of STALL_METRICS), for one launch of each of the
candidate's own Triton kernels: a second or so of replay instead of `--set full`'s
dozens of passes.

The GPU is asked for in phases (a handshake through files beside the report): the
driver imports torch, loads the candidate and signals `ready` without touching the GPU;
once granted the GPU beside other correctness runs (`shared`) it makes the inputs and
runs the candidate twice (compile, warm-up) and signals `warm`; once granted the GPU to
itself (`exclusive`) it runs the one profiled call between cudaProfilerStart/Stop,
during which ncu replays it, and signals `done`. Starting ncu and Python, the imports,
writing and exporting the report hold nothing.

The report is exported (`ncu --import ... --csv --page details` and `--page raw`) and
summarised: duration, DRAM and SM throughput as % of peak, achieved occupancy,
registers per thread, shared memory per block, L2 hit rate, the top three warp-stall
reasons and ncu's top recommendation. The report stays under the run directory.

Standard library only: the profiled process is worker/profile_driver.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelladder.verifier.contract.profile_phases import (
    DONE,
    DRIVER_MODULE,
    PHASES,
    READY,
    REPLAY_GO,
    SIGNAL_POLL_S,
    WARM,
    WARM_GO,
)

NCU_FALLBACK = "/usr/local/cuda/bin/ncu"
COUNTERS_BLOCKED = "ERR_NVGPUCTRPERM"
# what summarize() reads, and nothing more: the sections of the details page it looks in
# (Speed Of Light, Occupancy, Launch Statistics, Warp State) and, on the raw page, the L2
# hit rate. MemoryWorkloadAnalysis's section gave only that rate to the summary and cost
# half a second of the GPU per profile for its one pass: 1.76 s with it, 1.27 s with its
# rate asked as one metric (bench/profile_cost.py, the H200, 2026-12-03).
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
L2_HIT_METRIC = "lts__t_sector_hit_rate.pct"  # the section's "L2 Hit Rate"
# the raw page's warp-stall ratios (names as ncu 2025.3 on the H200 wrote them)
STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss",
    "lg_throttle", "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc",
    "no_instruction", "not_selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)  # fmt: skip
STALL_METRICS = tuple(
    f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS
)
# @triton.jit, @jit and Gluon's @gluon.jit (with arguments or not, under other decorators)
_JIT_DEF = re.compile(r"@(?:\w+\.)?jit\b[^\n]*\n(?:[ \t]*@[^\n]*\n|[ \t]*\n)*[ \t]*def\s+(\w+)")
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")
_NOT_A_STALL = {"selected"}  # the warp was issuing, not waiting
_TIME_UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}  # fmt: skip
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "KB": 1e3, "MB": 1e6, "KiB": 1024, "MiB": 1 << 20}  # fmt: skip


@dataclass(frozen=True)
class ProfileSummary:
    """What a person (or a proposer) needs of an ncu report, for the slowest kernel of
    the profiled call."""

    kernel: str
    kernels: int  # kernels the call launched
    duration_us: float | None
    dram_pct: float | None  # DRAM throughput, % of peak
    sm_pct: float | None  # Compute (SM) throughput, % of peak
    achieved_occupancy_pct: float | None
    registers_per_thread: int | None
    shared_mem_per_block_bytes: float | None  # static + dynamic (+ driver) per block
    l2_hit_pct: float | None
    stalls: tuple[tuple[str, float], ...] = ()  # top 3 (reason, cycles per issued instr.)
    recommendation: str = ""  # ncu's rule with the largest estimated speedup, one line
    block: str = ""
    grid: str = ""
    device: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stalls"] = [list(s) for s in self.stalls]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileSummary:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["stalls"] = tuple((str(a), float(b)) for a, b in d.get("stalls") or ())
        return cls(**known)

    @property
    def bound(self) -> str:
        """'memory' or 'compute' by the larger throughput; '' when unknown."""
        if self.dram_pct is None or self.sm_pct is None:
            return ""
        return "memory" if self.dram_pct >= self.sm_pct else "compute"

    def lines(self) -> list[str]:
        """The summary as short lines (the PROFILE block of a prompt, the log)."""

        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f}%"

        out = [
            f"kernel {self.kernel} (grid {self.grid}, block {self.block}; {self.kernels} kernel(s) per call)",
            f"duration {'n/a' if self.duration_us is None else f'{self.duration_us:.2f} us'}; "
            f"DRAM {pct(self.dram_pct)} of peak, SM {pct(self.sm_pct)} of peak"
            + (f" ({self.bound}-bound)" if self.bound else ""),
            f"achieved occupancy {pct(self.achieved_occupancy_pct)}; registers/thread "
            f"{self.registers_per_thread if self.registers_per_thread is not None else 'n/a'}; "
            f"shared memory/block {_bytes_text(self.shared_mem_per_block_bytes)}; L2 hit {pct(self.l2_hit_pct)}",
        ]
        if self.stalls:
            out.append(
                "top warp stalls: "
                + ", ".join(f"{r.replace('_', ' ')} {v:.2f}" for r, v in self.stalls)
            )
        if self.recommendation:
            out.append(f"ncu: {self.recommendation}")
        return out


@dataclass
class _Kernel:
    id: str
    name: str
    block: str = ""
    grid: str = ""
    device: str = ""
    metrics: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    rules: list[tuple[float, str]] = field(default_factory=list)  # (estimated speedup, text)

    def value(self, section: str, name: str) -> tuple[float, str] | None:
        hit = self.metrics.get((section, name))
        if hit is None:
            hit = next((v for (s, n), v in self.metrics.items() if n == name), None)
        if hit is None:
            return None
        unit, text = hit
        number = _number(text)
        return None if number is None else (number, unit)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def _bytes_text(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v / 1024:.1f} KiB" if v >= 1024 else f"{v:.0f} B"


def parse_details(text: str) -> list[_Kernel]:
    """ncu's `--csv --page details` export: one row per (kernel, section, metric), and
    rule rows (Rule Name/Type/Description, Estimated Speedup)."""
    kernels: dict[str, _Kernel] = {}
    for row in csv.DictReader(io.StringIO(text)):
        kid = row.get("ID")
        if kid is None or not row.get("Kernel Name"):
            continue
        k = kernels.setdefault(
            kid,
            _Kernel(
                kid,
                row["Kernel Name"],
                block=row.get("Block Size", ""),
                grid=row.get("Grid Size", ""),
                device=row.get("Device", ""),
            ),
        )
        section = row.get("Section Name", "")
        if row.get("Metric Name"):
            k.metrics[(section, row["Metric Name"])] = (
                row.get("Metric Unit", ""),
                row.get("Metric Value", ""),
            )
        if row.get("Rule Name") and row.get("Rule Type") == "OPT":
            speedup = _number(row.get("Estimated Speedup") or "") or 0.0
            k.rules.append((speedup, _first_sentence(row.get("Rule Description", ""))))
    return list(kernels.values())


def parse_raw(text: str) -> dict[str, dict[str, str]]:
    """`--csv --page raw` (a header row, a units row, one row per kernel): per kernel ID,
    its row as {metric name: value}."""
    rows = list(csv.reader(io.StringIO(text)))
    out: dict[str, dict[str, str]] = {}
    for row in rows[2:] if len(rows) >= 3 else ():
        record = dict(zip(rows[0], row, strict=False))
        out[record.get("ID", str(len(out)))] = record
    return out


def raw_stalls(record: Mapping[str, str]) -> dict[str, float]:
    """A raw row's warp-stall reasons: each one's average cycles per issued instruction."""
    stalls: dict[str, float] = {}
    for name, value in record.items():
        m = _STALL.match(name)
        if m and m["reason"] not in _NOT_A_STALL:
            number = _number(value)
            if number is not None:
                stalls[m["reason"]] = number
    return stalls


def raw_l2_hit(record: Mapping[str, str]) -> float | None:
    """A raw row's L2 hit rate (%), rounded as the details page shows it."""
    number = _number(record.get(L2_HIT_METRIC, ""))
    return None if number is None else round(number, 2)


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    m = re.search(r"(?<=[A-Za-z0-9)%])\. (?=[A-Z])", text)
    return text[: m.start() + 1] if m else text[:300]


def summarize(details_csv: str, raw_csv: str = "") -> ProfileSummary | None:
    """The summary of the call's slowest kernel; None when the export holds no kernel."""
    kernels = parse_details(details_csv)
    if not kernels:
        return None

    def duration(k: _Kernel) -> float:
        v = k.value("GPU Speed Of Light Throughput", "Duration")
        return -1.0 if v is None else v[0] * _TIME_UNITS_US.get(v[1], 1.0)

    k = max(kernels, key=duration)
    raw = parse_raw(raw_csv).get(k.id, {}) if raw_csv else {}
    top = tuple(sorted(raw_stalls(raw).items(), key=lambda kv: -kv[1])[:3])

    def pct(section: str, name: str) -> float | None:
        v = k.value(section, name)
        return None if v is None else v[0]

    shared = None
    for name in (
        "Static Shared Memory Per Block",
        "Dynamic Shared Memory Per Block",
        "Driver Shared Memory Per Block",
    ):
        v = k.value("Launch Statistics", name)
        if v is not None:
            unit = v[1].split("/")[0]
            shared = (shared or 0.0) + v[0] * _BYTE_UNITS.get(unit, 1)
    regs = k.value("Launch Statistics", "Registers Per Thread")
    l2_hit = pct("Memory Workload Analysis", "L2 Hit Rate")  # a report with the section
    best_rule = max(k.rules, default=(0.0, ""), key=lambda r: r[0])
    dur = duration(k)
    return ProfileSummary(
        kernel=k.name,
        kernels=len(kernels),
        duration_us=None if dur < 0 else round(dur, 3),
        dram_pct=pct("GPU Speed Of Light Throughput", "DRAM Throughput"),
        sm_pct=pct("GPU Speed Of Light Throughput", "Compute (SM) Throughput"),
        achieved_occupancy_pct=pct("Occupancy", "Achieved Occupancy"),
        registers_per_thread=None if regs is None else int(regs[0]),
        shared_mem_per_block_bytes=shared,
        l2_hit_pct=l2_hit if l2_hit is not None else raw_l2_hit(raw),
        stalls=top,
        recommendation=best_rule[1],
        block=k.block,
        grid=k.grid,
        device=k.device,
    )


# --- running ncu --------------------------------------------------------------------------


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    return NCU_FALLBACK if os.access(NCU_FALLBACK, os.X_OK) else None


def jit_kernels(source: str) -> tuple[str, ...]:
    """The names of the candidate's own @triton.jit and @gluon.jit functions, in order
    (ncu's kernel filter: torch's kernels in the same call are not replayed; a name that is
    a helper, not a kernel, matches nothing)."""
    return tuple(dict.fromkeys(_JIT_DEF.findall(source)))


def profile_command(
    ncu: str,
    report_base: str,
    driver: Sequence[str],
    kernels: Sequence[str] = (),
    stalls: bool = True,
) -> list[str]:
    """ncu over the driver: only the call between cudaProfilerStart/Stop is profiled, only
    SECTIONS (and L2_HIT_METRIC and STALL_METRICS with `stalls`), one launch of each named kernel (one
    launch when none is named), the clocks as they are."""
    cmd = [ncu, "--profile-from-start", "off", "--target-processes", "all"]
    # the GPU's clocks left as they are: ncu's default locks them to base for the replay,
    # which ran the kernel at base clock (attention 392 us against 313 us at the clocks
    # the timer sees) and held the GPU 0.2-0.5 s longer (bench/profile_cost.py, 2026-12-03)
    cmd += ["--clock-control", "none"]
    for section in SECTIONS:
        cmd += ["--section", section]
    if stalls:  # the raw page's metrics; without them (a GPU that refuses one) the sections alone
        cmd += ["--metrics", ",".join((L2_HIT_METRIC, *STALL_METRICS))]
    if kernels:
        cmd += ["--kernel-name", "regex:^(" + "|".join(re.escape(k) for k in kernels) + ")$"]
    cmd += ["--launch-count", str(max(1, len(kernels)))]
    return [*cmd, "-f", "-o", report_base, *driver]


def export_commands(ncu: str, report: str) -> tuple[list[str], list[str]]:
    base = [ncu, "--import", report, "--csv", "--page"]
    return base + ["details"], base + ["raw"]


@dataclass(frozen=True)
class ProfileOutcome:
    status: str  # "ok" | "unavailable" | "failed"
    reason: str = ""
    summary: ProfileSummary | None = None
    report: str = ""  # path of the .ncu-rep
    gpu_s: float | None = None  # the GPU held to itself (the replay), seconds
    shared_s: float | None = None  # the GPU held beside correctness runs (the warm-up)
    wall_s: float | None = None  # the whole profile: ncu's start to the exported summary
    # the driver's own seconds: ncu readying its collection (before the GPU is held to
    # itself), the profiled call with its replay, ncu's stop
    phases: dict[str, float] | None = None


def availability(
    ncu: str | None = None, timeout_s: float = 60.0, probe: bool = True
) -> tuple[bool, str]:
    """(True, version) when ncu runs and reads the counters of a tiny kernel on this
    machine's GPU; (False, one line) if not. probe=False stops at `ncu --version` (a run
    at its start: its first profile says whether the counters are readable)."""
    ncu = ncu or find_ncu()
    if ncu is None:
        return False, "Nsight Compute (ncu) not found on PATH or in /usr/local/cuda/bin"
    try:
        done = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"ncu does not run: {exc}"
    version = (done.stdout.strip().splitlines() or ["ncu"])[-1]
    if done.returncode != 0:
        return False, f"ncu --version failed: {version}"
    if not probe:
        return True, version
    ok, why = counters_readable(ncu, timeout_s=max(timeout_s, 120.0))
    return (True, version) if ok else (False, why)


COUNTER_PROBE = "import torch; x = torch.ones(1024, device='cuda'); torch.cuda.synchronize(); (x + 1).sum().item()"


def counters_readable(ncu: str, timeout_s: float = 180.0) -> tuple[bool, str]:
    """Profile one tiny torch kernel: (True, "") when ncu read its counters, else
    (False, why) -- ERR_NVGPUCTRPERM when the driver keeps them from this user."""
    cmd = [ncu, "--section", "SpeedOfLight", "-c", "1", sys.executable, "-c", COUNTER_PROBE]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"ncu did not finish: {exc}"
    log = done.stdout + done.stderr
    if COUNTERS_BLOCKED in log:
        return False, "the GPU's performance counters are not readable (ERR_NVGPUCTRPERM)"
    if "==PROF== Disconnected" in log or "Duration" in log:
        return True, ""
    tail = " ".join(log.strip().splitlines()[-2:])[:200]
    return False, f"ncu profiled nothing (exit {done.returncode}): {tail}"


GpuHold = Callable[[], "contextlib.AbstractAsyncContextManager[Any]"]


def profile_candidate(
    op_wire: Any, source: str, out_dir: str | Path, name: str, timeout_s: float = 300.0
) -> ProfileOutcome:
    """profile_candidate_async from synchronous code, asking nobody for the GPU."""
    return asyncio.run(profile_candidate_async(op_wire, source, out_dir, name, timeout_s=timeout_s))


async def profile_candidate_async(
    op_wire: Any,
    source: str,
    out_dir: str | Path,
    name: str,
    *,
    timeout_s: float = 300.0,
    shared: GpuHold | None = None,
    exclusive: GpuHold | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> ProfileOutcome:
    """Profile one candidate on the op's largest shape in a fresh process; the report
    and its CSV exports stay in out_dir. `shared()` and `exclusive()` are the caller's
    holds on the GPU (async context managers): shared while the driver makes its inputs
    and warms up, exclusive only while ncu replays the profiled call. Nothing is held
    while ncu and the driver start."""
    t0 = time.monotonic()
    ncu = find_ncu()
    if ncu is None:
        return ProfileOutcome("unavailable", "Nsight Compute (ncu) not found")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = str(out / name)
    (out / f"{name}.op.json").write_text(json.dumps(op_wire), encoding="utf-8")
    (out / f"{name}.py").write_text(source, encoding="utf-8")
    driver = [sys.executable, "-m", DRIVER_MODULE, "drive",
              str(out / f"{name}.op.json"), str(out / f"{name}.py"), base]  # fmt: skip
    log_path = out / f"{name}.ncu.log"
    stage = on_stage or (lambda _s: None)
    turns = _Turns(
        base, shared or contextlib.nullcontext, exclusive or contextlib.nullcontext, stage
    )
    for stalls in (True, False):
        for suffix in (READY, WARM_GO, WARM, REPLAY_GO, DONE, PHASES):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix)
        command = profile_command(ncu, base, driver, jit_kernels(source), stalls=stalls)
        failure, code = await _run_profiled(command, log_path, turns, timeout_s)
        log = log_path.read_text(encoding="utf-8", errors="replace")
        if stalls and _metric_refused(log) and not Path(base + ".ncu-rep").exists():
            continue  # a GPU or ncu without one of the stall metrics: the sections alone
        break
    extra: dict[str, Any] = {**turns.times}
    with contextlib.suppress(OSError, ValueError):
        extra["phases"] = json.loads(Path(base + PHASES).read_text(encoding="utf-8"))

    def done(status: str, reason: str = "", **kw: Any) -> ProfileOutcome:
        return ProfileOutcome(status, reason, wall_s=round(time.monotonic() - t0, 3), **extra, **kw)

    if COUNTERS_BLOCKED in log:
        return done("unavailable", "ncu cannot read the GPU's counters (ERR_NVGPUCTRPERM)")
    if failure is not None:
        return done("failed", failure)
    report = base + ".ncu-rep"
    if not Path(report).exists():
        tail = " ".join(log.strip().splitlines()[-2:])[:300]
        return done("failed", f"ncu wrote no report (exit {code}): {tail}")
    stage("export")
    texts = []
    for cmd, suffix in zip(export_commands(ncu, report), ("details", "raw"), strict=True):
        exported = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        stdout, _ = await asyncio.wait_for(exported.communicate(), timeout_s)
        text = stdout.decode("utf-8", errors="replace")
        (out / f"{name}_{suffix}.csv").write_text(text, encoding="utf-8")
        texts.append(text)
    summary = summarize(texts[0], texts[1])
    if summary is None:
        return done("failed", "the report holds no kernel", report=report)
    return done("ok", summary=summary, report=report)


async def _run_profiled(
    command: list[str], log_path: Path, turns: _Turns, timeout_s: float
) -> tuple[str | None, int | None]:
    """ncu over the driver through the handshake: (why it failed or None, exit code)."""
    with open(log_path, "w", encoding="utf-8") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=log_file,
            stderr=asyncio.subprocess.STDOUT, env=_driver_env(),
        )  # fmt: skip
        try:
            failure = await asyncio.wait_for(turns.take(proc), timeout_s)
            if failure is None:
                await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            failure = f"ncu ran past {timeout_s:.0f} s"
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
    return failure, proc.returncode


def _driver_env() -> dict[str, str]:
    """The profiled process finds the candidate's kernels in the workers' Triton cache
    (they compiled them for every shape): its warm-up, which holds the GPU beside
    correctness runs, loads them instead of compiling."""
    from kernelladder.verifier.contract.env import TRITON_CACHE_MANAGER, compile_cache_dirs

    env = dict(os.environ)
    for name, path in compile_cache_dirs(env).items():
        env.setdefault(name, path)
    env.setdefault("TRITON_CACHE_MANAGER", TRITON_CACHE_MANAGER)
    return env


def _metric_refused(log: str) -> bool:
    """ncu refused a metric it does not know on this GPU (an error naming a metric)."""
    return any("==ERROR==" in line and "metric" in line.lower() for line in log.splitlines())


@dataclass
class _Turns:
    """The profiled process's turns on the GPU against the caller's holds on it: the
    driver's files beside the report (`base`), the holds, the stage reported, and the
    seconds each hold lasted."""

    base: str
    shared: GpuHold
    exclusive: GpuHold
    stage: Callable[[str], None]
    times: dict[str, float | None] = field(
        default_factory=lambda: {"gpu_s": None, "shared_s": None}
    )

    async def take(self, proc: Any) -> str | None:
        """The driver's phases, each under its hold; None when the profiled call is done,
        else why not."""
        self.stage("start")
        if not await _signal(proc, self.base + READY):
            return f"the profiled process ended before it was ready (exit {proc.returncode})"
        self.stage("warm")
        if not await self._turn(proc, self.shared, WARM_GO, WARM, "shared_s"):
            return f"the profiled process ended in its warm-up (exit {proc.returncode})"
        self.stage("replay")
        if not await self._turn(proc, self.exclusive, REPLAY_GO, DONE, "gpu_s"):
            return f"the profiled process ended in the profiled call (exit {proc.returncode})"
        return None

    async def _turn(self, proc: Any, hold: GpuHold, go: str, done: str, key: str) -> bool:
        """One turn under `hold`: `go` given, `done` waited for (its seconds under
        times[key]); False when the process ended first."""
        async with hold():
            t = time.monotonic()
            Path(self.base + go).touch()
            ok = await _signal(proc, self.base + done)
            self.times[key] = round(time.monotonic() - t, 3)
        return ok


async def _signal(proc: Any, path: str) -> bool:
    """Wait for the driver's file `path`; False when the process ended without it."""
    while not os.path.exists(path):
        if proc.returncode is not None:  # set by the loop as the process exits
            return os.path.exists(path)
        await asyncio.sleep(SIGNAL_POLL_S)
    return True
