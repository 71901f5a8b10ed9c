"""What the tests share, in one place (no test module imports another):

- the engine's test doubles for its two seams: ScriptedRunner, ConstantSpeedRunner (every
  candidate passes at 1.0x on a "GPU": no gain ever), ScriptedProposer, HeldProposer
  (scripted moves, then it waits so a branch stays open for steering);
- a scripted run: make_run, scripted_op; for the app, live_app, cpu_search_app (the real
  search on rmsnorm, verdicts scripted), ready, logged, asking;
- for the CLI: usage_line (exit 2, one line), saved_run, insert_line;
- ROOT, EXAMPLES, CHEATS, DATA; and one `until` to wait on a condition (pilot=pilot in
  the app's tests, so the screen goes on drawing meanwhile).

Why doubles: the engine's behaviour (rules, gates, steering, resume, backpressure)
depends on verdicts with measured speedups and on proposals arriving on cue, and this
machine has no GPU (no speed exists here) and no model. The real verifier and the real
`search` proposer are exercised end to end in cli/test_optimize_cli.py; these doubles only
let the engine tests script outcomes exactly and fast. A scripted source carries its
fate in a marker line the ScriptedRunner reads, e.g.

    # outcome: pass 1.4 noise 0.02      -> a passing verdict, speedup 1.4x
    # outcome: fail correctness max error 3.5 at index 17
    # outcome: crash
    # outcome: lost 1 then pass 1.2     -> RunnerLost once, then a pass
    # outcome: hold                      -> waits until the runner's `release` is set
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelladder.engine.protocols import (
    Proposal,
    ProposalContext,
    ProposerBase,
    ProposerExhausted,
    RunnerBase,
    RunnerLost,
    VerifyRequest,
)
from kernelladder.verifier.contract.verdict import GATES, Feedback, GateResult, Verdict
from kernelladder.verifier.host.gpu_arbiter import GpuArbiter

ROOT = Path(__file__).resolve().parent.parent  # the repository
EXAMPLES = ROOT / "examples"  # committed runs and KernelBench problems
# H200 runs of 2026-11-30 and 2026-12-01 that tests read attempt by attempt (fixtures)
H200_RUNS = ROOT / "tests" / "data" / "h200-runs"
# default searches on an H100 of 2026-12-06 (once examples/): the app and replay fixtures
H100_RUNS = ROOT / "tests" / "data" / "h100-runs"
CHEATS = ROOT / "tests" / "cheats"  # candidates that try to fool the verifier
DATA = ROOT / "tests" / "data"  # expected outputs and saved verdicts the tests read

_OUTCOME = re.compile(r"#\s*outcome:\s*(.*)")


def verdict_for(source: str, device: str) -> Verdict:
    m = _OUTCOME.search(source)
    spec = (m.group(1) if m else "pass").strip()
    if " then " in spec:
        spec = spec.split(" then ", 1)[1]
    words = spec.split()
    kind = words[0]
    gates: dict[str, GateResult] = {}
    if kind == "pass":
        speed = float(words[1]) if len(words) > 1 and device == "cuda" else None
        noise = float(words[3]) if len(words) > 3 and words[2] == "noise" else 0.01
        for g in GATES:
            gates[g] = GateResult("pass", "ok")
        if speed is None:
            gates["speed"] = GateResult("skipped", "no GPU: speed not measured")
        return Verdict(
            verdict="pass", kind="pass", gate=None, gates=gates, op="scripted", device=device,
            source_hash="", speedup=speed, noise=noise if speed else None,
            floor_fraction=0.5 if speed else None,
            feedback=Feedback(expected="ref", saw="ok", fence="the fence"),
        )  # fmt: skip
    if kind in ("crash", "timeout"):
        gates[kind] = GateResult("fail", f"worker {kind} (pid 4242)")
        return Verdict(
            verdict="fail", kind=kind, gate=kind, gates=gates, op="scripted", device=device,
            source_hash="", feedback=Feedback(expected="returns", saw=kind, fence="the fence"),
        )  # fmt: skip
    gate = words[1] if len(words) > 1 else "correctness"
    detail = " ".join(words[2:]) or "wrong"
    for g in GATES:
        gates[g] = GateResult("pass", "ok")
        if g == gate:
            gates[g] = GateResult("fail", detail)
            break
    return Verdict(
        verdict="fail", kind="fail", gate=gate, gates=gates, op="scripted", device=device,
        source_hash="", feedback=Feedback(expected="1.0", saw=detail, fence="the fence"),
    )  # fmt: skip


class ConstantSpeedRunner(RunnerBase):
    """Verifier double (no GPU here): every candidate passes at 1.0x (no gain, ever)."""

    name = "constant"
    slots = 1

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        return {"device": "cuda", "gpu": "Scripted GPU", "slots": 1, "host": "local"}

    async def verify(self, request, on_progress=None, on_slot=None):
        return verdict_for("# outcome: pass 1.0", "cuda")


class ScriptedRunner(RunnerBase):
    """Runner double: verdicts come from the candidate's `# outcome:` line."""

    name = "scripted"

    def __init__(self, device: str = "cuda", slots: int = 1, delay: float = 0.0) -> None:
        self.device = device
        self._slots = slots
        self.delay = delay
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.lost: dict[str, int] = {}
        self.started = False
        self.closed = False
        self.concurrent = 0
        self.max_concurrent = 0

    @property
    def slots(self) -> int:
        return self._slots

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def describe(self) -> dict[str, Any]:
        gpu = "Scripted GPU" if self.device == "cuda" else None
        return {"device": self.device, "gpu": gpu, "slots": self._slots, "host": "local"}

    async def verify(self, request: VerifyRequest, on_progress=None, on_slot=None) -> Verdict:
        self.calls.append(request.source)
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            m = _OUTCOME.search(request.source)
            spec = m.group(1) if m else "pass"
            lost = re.match(r"lost (\d+) then", spec)
            if lost:
                seen = self.lost.get(request.source, 0)
                if seen < int(lost.group(1)):
                    self.lost[request.source] = seen + 1
                    raise RunnerLost("connection to scripted-box lost")
            if on_progress is not None:
                for gate in ("load", "correctness"):
                    for i in range(10):
                        on_progress(gate, f"{gate} step {i}")
            if spec.strip().startswith("hold"):
                await self.release.wait()
                return verdict_for("# outcome: pass 1.1", request.device)
            if self.delay:
                await asyncio.sleep(self.delay)
            return verdict_for(request.source, request.device)
        finally:
            self.concurrent -= 1


def move(
    outcome: str, name: str | None = None, *, undo: str = "low", meta=None, body: str = ""
) -> Proposal:
    """A scripted proposal whose verdict will be `outcome`."""
    label = name or outcome
    source = (
        f"# {label}\n# outcome: {outcome}\nimport triton\n{body}\ndef kernel(x):\n    return x\n"
    )
    return Proposal(
        source=source, strategy="scripted", move=label, undo_cost=undo,
        undo_reason=f"{undo} move", meta=dict(meta or {}),
    )  # fmt: skip


class ScriptedProposer(ProposerBase):
    """Proposer double: hands out scripted moves per branch (or from a shared list), and
    records every ProposalContext it was given."""

    name = "scripted"

    def __init__(
        self,
        moves: list[Proposal] | dict[str, list[Proposal]] | Callable[[ProposalContext], Proposal],
        *,
        strategies: list[str] | None = None,
        delay: float = 0.0,
    ) -> None:
        self._moves = moves
        self._labels = strategies or ["alpha", "beta", "gamma", "delta"]
        self.delay = delay
        self.contexts: list[ProposalContext] = []
        self._counter = itertools.count(1)
        self.hold = asyncio.Event()
        self.hold.set()
        self.cancelled = 0

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        return self._labels[:k]

    async def propose(self, ctx: ProposalContext) -> Proposal:
        self.contexts.append(ctx)
        try:
            await self.hold.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if callable(self._moves):
            return self._moves(ctx)
        queue = self._moves if isinstance(self._moves, list) else self._moves.get(ctx.branch_id, [])
        if not queue:
            raise ProposerExhausted("script finished")
        p = queue.pop(0)
        if isinstance(p, BaseException):
            raise p
        # unique source per attempt, so "new passing variant" means what it says
        return Proposal(**{**p.__dict__, "source": p.source + f"# n{next(self._counter)}\n"})


# --- helpers shared by the engine tests ------------------------------------------------

SCRIPTED_OP = None  # built lazily so importing this module stays cheap


def scripted_op():
    from kernelladder.engine import OpInfo

    return OpInfo(
        name="scripted",
        kind="builtin",
        wire="scripted",
        description={"name": "scripted", "fence": "the fence", "signature": "kernel(x)"},
        starting_source="# starting candidate\n# outcome: pass 1.0\n",
    )


def make_run(tmp_path, moves, *, runner=None, proposer=None, strategies=None, **options):
    from kernelladder.engine import create_run
    from kernelladder.engine.run.options import RunOptions

    options.setdefault("branches", 1)
    options.setdefault("gate", "veto")
    options.setdefault("device", "cuda")
    runner = runner or ScriptedRunner(device=options["device"])
    proposer = proposer or ScriptedProposer(moves, strategies=strategies)
    opts = RunOptions(op="scripted", proposer="scripted", run_dir=str(tmp_path / "run"), **options)
    return create_run(opts, runner=runner, proposer=proposer, op=scripted_op()), runner, proposer


async def until(predicate, what: str = "condition", timeout: float = 10.0, *, pilot=None):
    """Wait until predicate() holds, else fail naming `what`. In an app test pass the
    pilot: it pauses through the app so the screen goes on drawing meanwhile."""
    if not callable(predicate):
        raise TypeError("until(predicate, what, timeout, pilot=pilot): predicate first")
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        if pilot is not None:
            await pilot.pause(0.02)
        else:
            await asyncio.sleep(0.005)


def kinds(events) -> list[str]:
    return [e.kind for e in events]


# --- the CLI's tests ---------------------------------------------------------------------


def usage_line(capsys, *argv: str, entry=None) -> str:
    """Run the CLI in-process (`kernelladder`, or `entry`); it must exit 2 with exactly
    one line on stderr, which is returned."""
    if entry is None:
        from kernelladder.cli import main as entry
    try:
        code = entry(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def saved_run(tmp_path: Path, name: str = "run") -> Path:
    """A copy of the committed CPU run (examples/cpu-rmsnorm-run) to damage or resume."""
    run_dir = tmp_path / name
    shutil.copytree(EXAMPLES / "cpu-rmsnorm-run", run_dir)
    return run_dir


def insert_line(run_dir: Path, index: int, line: str) -> None:
    """Insert a line into a run's event log before line `index` (0-based)."""
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(index, line)
    path.write_text("".join(lines))


# --- the app's tests ---------------------------------------------------------------------

SIZE = (150, 44)


class HeldProposer(ProposerBase):
    """Proposer double: scripted moves per branch, then it waits (cancellable) so the
    branch stays open for steering."""

    name = "scripted"

    def __init__(self, moves: dict[str, list[Proposal]]) -> None:
        self.moves = {k: list(v) for k, v in moves.items()}
        self.count = 0

    def strategies(self, op, k: int) -> list[str]:
        return ["alpha", "beta", "gamma"][:k]

    async def propose(self, ctx) -> Proposal:
        queue = self.moves.get(ctx.branch_id) or []
        if not queue:
            await asyncio.Event().wait()
        p = queue.pop(0)
        self.count += 1
        return Proposal(**{**p.__dict__, "source": p.source + f"# n{self.count}\n"})


def live_app(tmp_path: Path, *, gate: str = "ask") -> tuple[Any, Any]:
    """A live app over the real engine: ScriptedRunner verdicts, HeldProposer moves (b1's
    second move is high undo cost, so it waits at a gate under --gate ask)."""
    from kernelladder.app.app import KernelLadderApp
    from kernelladder.engine import create_run
    from kernelladder.engine.run.options import RunOptions

    proposer = HeldProposer(
        {
            "b1": [move("pass 1.2", "BLOCK 256"), move("pass 1.4", "two-pass", undo="high")],
            "b2": [move("pass 1.1", "4 warps")],
        }
    )
    options = RunOptions(
        op="scripted", proposer="scripted", branches=2, gate=gate, device="cuda",
        run_dir=str(tmp_path / "run"), max_attempts=20, stagnation=20,
    )  # fmt: skip
    run = create_run(options, runner=ScriptedRunner(device="cuda"), proposer=proposer,
                     op=scripted_op())  # fmt: skip
    app = KernelLadderApp(run=run, frozen=True, batch_interval=0.02)
    return app, run


def cpu_search_app(tmp_path: Path | str, op: str = "rmsnorm", **options: Any) -> tuple[Any, Any]:
    """The default CPU run of `op` in the app: the real `search` proposer (its gates,
    families and parameters are a CPU run's), three branches, gates asked; its verdicts
    from the ScriptedRunner (every candidate passes at once with no speed, as the CPU
    interpreter's do, without the interpreter's seconds per candidate). rmsnorm's four
    families leave one free line, so one branch at a time waits to change to it;
    attention's seven let all three branches wait at a gate at once."""
    from kernelladder.app.app import KernelLadderApp
    from kernelladder.engine import create_run
    from kernelladder.engine.proposers.search import SearchProposer
    from kernelladder.engine.run.op_info import load_op_info
    from kernelladder.engine.run.options import RunOptions

    settings = {"branches": 3, "gate": "ask", "device": "cpu", "max_attempts": 60, **options}
    opts = RunOptions(op=op, proposer="search", run_dir=str(Path(tmp_path) / "run"), **settings)
    run = create_run(
        opts, runner=ScriptedRunner(device="cpu"), proposer=SearchProposer(),
        op=load_op_info(op),
    )  # fmt: skip
    return KernelLadderApp(run=run, frozen=True, batch_interval=0.02), run


def logged(run, kind: type) -> list:
    """The events of this kind in the run's log."""
    from kernelladder.engine.record.log import read_events

    return [e for e in read_events(run.run_dir) if isinstance(e, kind)]


async def ready(pilot, app, run) -> None:
    """Both branches judged their first attempts and b1's risky move waits at gate g1."""
    await until(lambda: app.main.view.gate("g1") is not None, "gate g1", pilot=pilot)
    await until(lambda: app.main.view.attempts_judged >= 2, "two verdicts", pilot=pilot)


def asking(app) -> bool:
    """The trust modal is up and ready (its buttons drawn, Cancel focused)."""
    from kernelladder.app.modals.trust_host_key import TrustHostKeyScreen

    screen = app.screen
    return (
        isinstance(screen, TrustHostKeyScreen)
        and screen.focused is not None
        and screen.focused.id == "no"
        and screen.focused.region.area > 0
    )


H200_RUN = H200_RUNS / "rmsnorm-search"  # speeds, the speed gate's rounds


def tree_text(app) -> str:
    return "\n".join(app.main.screen_state()["tree"])


class SlowStartRunner(ScriptedRunner):
    """ScriptedRunner whose start waits until the test releases it, as a verifier worker
    loading torch and Triton (or an SSH connection) keeps a real run waiting."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.release = asyncio.Event()

    async def start(self) -> None:
        await self.release.wait()
        await super().start()


def replay_app(run_dir: Path, **kwargs) -> Any:
    """A saved run in the app, frozen at its end."""
    from kernelladder.app.app import KernelLadderApp
    from kernelladder.app.replay import load_events

    return KernelLadderApp(
        events=load_events(run_dir), run_dir=run_dir, frozen=True, at_end=True, **kwargs
    )


def footer_keys(app) -> dict[str, tuple[str, bool, Any]]:
    """What the footer shows: key -> (description, enabled, where on the screen)."""
    from textual.widgets._footer import FooterKey

    return {
        key.key: (key.description, not key.has_class("-disabled"), key.region)
        for key in app.main.query(FooterKey).results()
    }


async def settled_footer(pilot, app) -> dict[str, tuple[str, bool, Any]]:
    """The footer once it stopped rebuilding itself (it recomposes after a bindings
    refresh, a frame or more after the screen is drawn)."""
    before: dict = {}
    for _ in range(100):
        keys = footer_keys(app)
        if keys and keys == before and all(r.width for _, _, r in keys.values()):
            return keys
        before = keys
        await pilot.pause(0.05)
    raise AssertionError(f"the footer never settled: {before}")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout


class Terminal:
    def __init__(self, command: str, cwd: Path) -> None:
        self.name = f"kl-{uuid.uuid4().hex[:8]}"
        # COLUMNS/LINES can reach the pane from the test's environment (they did under
        # pytest: 80x24); Textual would take them over the pane's 160x48
        env = (
            f"cd {cwd} && unset COLUMNS LINES && TERM=xterm-256color COLORTERM=truecolor "
            f"exec {command}"
        )
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "48", env],
            check=True, timeout=30,
        )  # fmt: skip

    def screen(self) -> str:
        return tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        for key in keys:
            tmux("send-keys", "-t", self.name, key)
            # apart, so an Escape is not read as the start of an alt-key sequence
            time.sleep(0.3)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name],
                              capture_output=True).returncode == 0  # fmt: skip

    def close(self) -> None:
        if self.alive():
            tmux("kill-session", "-t", self.name)


# --- a committed H200 run as the engine records it now (the standing tests) -------


def reranked_events(run: Path) -> list:
    """A committed H200 run's log as the engine records it now (shared by the standing tests).

    The runs under examples/ predate vs best: their VerdictReady events lack vs_best and
    standing_shapes, and their BestImproved were decided by the speedup over the reference.
    `reranked_events` gives the same log with both worked out as the engine now does, from
    the run's own recorded verdicts (attempts/<n>.json, real H200 timings): each passing
    VerdictReady carries its verdict's vs best and per-shape standing, and BestImproved
    follows from state.improvement after each verdict. Nothing is invented.
    """
    import dataclasses

    from kernelladder.engine.record import events as ev
    from kernelladder.engine.record import standing_rank
    from kernelladder.engine.record.log import read_attempt_verdict, read_events
    from kernelladder.engine.record.state import apply, improvement, new_state
    from kernelladder.verifier.contract.verdict import Verdict, vs_best

    state = new_state()
    out: list[ev.Event] = []
    seq = 0

    def add(e: ev.Event) -> None:
        nonlocal seq
        e = dataclasses.replace(e, seq=seq)
        seq += 1
        apply(state, e)
        out.append(e)

    for e in read_events(run):
        if isinstance(e, ev.BestImproved):
            continue
        if isinstance(e, ev.VerdictReady) and e.verdict == "pass" and e.speedup is not None:
            verdict = Verdict.from_dict(read_attempt_verdict(run, e.attempt))
            e = dataclasses.replace(
                e,
                vs_best=vs_best(verdict.timings),
                standing_shapes=standing_rank.standing_shapes(verdict.timings),
            )
        if isinstance(e, ev.RunFinished):
            best = state.attempts.get(state.best_attempt or -1)
            e = dataclasses.replace(
                e,
                best_attempt=state.best_attempt,
                best_speedup=state.best_speedup,
                best_vs_best=best.vs_best if best is not None else None,
            )
        add(e)
        if isinstance(e, ev.VerdictReady):
            branch, overall = improvement(state, e.attempt)
            if branch:
                a = state.attempts[e.attempt]
                add(
                    ev.BestImproved(
                        attempt=e.attempt,
                        branch_id=e.branch_id,
                        speedup=a.speedup,
                        overall=overall,
                        vs_best=a.vs_best,
                        ts=e.ts,
                    )  # fmt: skip
                )
    return out


def load_source(source: str, tmp_path: Path, name: str) -> Any:
    """A candidate's source imported as a module from a real file (@triton.jit and
    @gluon.jit read their functions' source from it); not left in sys.modules."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop(name, None)
    return module


class RecordingArbiter(GpuArbiter):
    """The real GPU arbiter, noting each grant as (shared holders, held alone) after it."""

    def __init__(self, name: str = "cpu:0") -> None:
        super().__init__(name)
        self.log: list[tuple[int, bool]] = []

    def _take(self, mode: str) -> None:
        super()._take(mode)
        self.log.append(self.holders)


# --- the web view's tests: `kernelladder serve` as a process ---------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`kernelladder serve ...` in its own process group (its per-page apps with it);
    its output (stdout and stderr) in `log`."""

    def __init__(self, *args: str, log: Path):
        self.log = log
        self.out = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelladder", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "200"},
        )

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"open (http://\S+)", self.output)
            if found:
                return found.group(1)
            assert self.process.poll() is None, self.output[-2000:]
            time.sleep(0.1)
        raise AssertionError(f"serve printed no URL in {timeout}s")

    def stop(self) -> None:
        """Ctrl-C, as a person presses it in the terminal: SIGINT to the whole group."""
        import signal

        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # an app a page left behind
        except ProcessLookupError:
            pass
        self.out.close()


def http_status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None):
    """(status, body) of one request."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def stop_owner(run_dir: Path) -> None:
    """Stop the process that owns a live run (one started in the background), if any."""
    import signal

    from kernelladder.engine.record.log import writer_active
    from kernelladder.engine.run.control import live_owner

    try:
        pid = live_owner(run_dir).pid
    except Exception:
        return

    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    # the log's lock, not the pid: a child of this process stays a zombie until reaped
    while writer_active(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)


def websocket_status(url: str, headers: dict[str, str]) -> int:
    """The status a websocket upgrade gets (101: opened)."""
    import base64
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = "" if "Host" in headers else f"Host: {parts.netloc}\r\n"
    request = (
        f"GET {parts.path} HTTP/1.1\r\n{host}Upgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + "\r\n"
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as s:
        s.sendall(request.encode())
        status = s.recv(4096).split(b"\r\n", 1)[0]
    return int(status.split()[1])
