"""The Ray runner against a real Ray cluster started here (one node on this machine, 2
CPUs, 2 CPU actors running the Triton interpreter). The cluster is one per module: its
start costs tens of seconds on a small machine.

The cluster's processes start without PYTHONPATH, so its actors can import kernelladder
only from what the runner ships through runtime_env py_modules. Runs go through the real
CLI in subprocesses (their own Ray drivers), as a person would run them.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import ROOT

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'kernelladder[ray]')")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

# Ray puts a driver's working directory on its workers' sys.path: drivers run elsewhere,
# so that the nodes import only what py_modules shipped.
ELSEWHERE = tempfile.gettempdir()

# Started in its own process (no PYTHONPATH): the cluster lives while its stdin is open.
HEAD = r"""
import sys, ray
ctx = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2,
               _temp_dir=sys.argv[1], log_to_driver=False)
print("ADDRESS", ctx.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""

# Token authentication is off for this loopback test cluster (it would need a token file
# shared by the head and every driver); a real cluster keeps it on.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **RAY_ENV, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    env.pop("KL_RAY_ADDRESS", None)
    env.update(extra)
    return env


@contextlib.contextmanager
def _head(**extra_env: str):
    """A one-node cluster whose head lives in its own process; (address, process)."""
    temp = tempfile.mkdtemp(prefix="klray", dir="/tmp")  # short: Ray's socket paths are long
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(RAY_ENV, **extra_env)
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, temp],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=temp,
    )
    try:
        address = ""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = head.stdout.readline()
            if not line:
                break
            if line.startswith("ADDRESS "):
                address = line.split()[1]
                break
        assert address, "the test's Ray cluster did not start"
        yield address, head
    finally:
        _stop_head(head)


def _stop_head(head: subprocess.Popen) -> None:
    if head.poll() is not None:
        return
    head.stdin.close()  # the head shuts its cluster down
    try:
        head.wait(90)
    except subprocess.TimeoutExpired:
        head.kill()
        head.wait(10)


@pytest.fixture(scope="module")
def cluster():
    with _head() as (address, _):
        yield address


def _cli(*args: str, timeout: float = 400, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", *args],
        capture_output=True,
        text=True,
        cwd=ELSEWHERE,
        env=_env(**env),
        timeout=timeout,
    )


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def _optimize(run_dir: Path, address: str, attempts: int) -> list[str]:
    return [
        "optimize",
        "rmsnorm",
        "--runner",
        "ray",
        "--ray-address",
        address,
        "--ray-slots",
        "2",
        "--device",
        "cpu",
        "--branches",
        "2",
        "--max-attempts",
        str(attempts),
        "--stagnation",
        "50",
        "--gate",
        "approve",
        "--run-dir",
        str(run_dir),
        "--json",
    ]


def test_search_run_spreads_attempts_over_both_actors(cluster, tmp_path):
    run_dir = tmp_path / "run"
    result = _cli(*_optimize(run_dir, cluster, 4))
    assert result.returncode == 0, result.stderr[-3000:]
    events = _events(run_dir)
    started = _of(events, "attempt_started")
    slots = {e["slot"] for e in started}
    assert len(slots) == 2, slots  # both actors verified attempts
    assert all(s.endswith((":cpu0", ":cpu1")) for s in slots), slots
    assert {e["runner"] for e in started} == {"ray:1 node 2 CPU"}
    judged = {e["attempt"] for e in _of(events, "verdict_ready")}
    assert judged == {e["attempt"] for e in started} and len(judged) == 4
    notices = [e["message"] for e in _of(events, "notice")]
    assert any(m.startswith(f"Ray cluster at {cluster}: 1 node") for m in notices), notices
    assert _of(events, "run_finished")[0]["reason"] == "max-attempts"
    assert json.loads(result.stdout)["runner"] == "ray:1 node 2 CPU"


LANES = r"""
import asyncio, json, sys, time
from kernelladder.engine.protocols import VerifyRequest
from kernelladder.engine.runners.ray.runner import RayRunner

source = open(sys.argv[2]).read()

async def main():
    runner = RayRunner(sys.argv[1], device="cpu", slots=1, per_gpu=2)
    await runner.start()
    seen, spans = [], []
    async def one():
        start = time.monotonic()
        verdict = await runner.verify(
            VerifyRequest(op="rmsnorm", source=source, device="cpu", min_speedup=0.0,
                          pipeline=True),
            on_slot=seen.append,
        )
        spans.append((start, time.monotonic()))
        return verdict
    try:
        a, b = await asyncio.gather(one(), one())
        print(json.dumps({
            "slots": runner.slots, "name": runner.name, "seen": sorted(seen),
            "verdicts": [a.verdict, b.verdict], "stages": [sorted(a.stages), sorted(b.stages)],
            "overlap": max(s for s, _ in spans) < min(e for _, e in spans),
        }))
    finally:
        await runner.close()

asyncio.run(main())
"""


def test_an_actor_runs_several_workers_that_share_its_gpu_through_an_arbiter(cluster):
    """per_gpu workers in one actor (one GPU): each a slot of the runner's, verifying at
    the same time, the pipelined stages granted by the actor's arbiter (on the CPU here,
    as the local pool's tests do)."""
    honest = ROOT / "tests" / "cheats" / "honest_rmsnorm.py"
    proc = subprocess.run(
        [sys.executable, "-c", LANES, cluster, str(honest)],
        capture_output=True, text=True, cwd=ELSEWHERE, env=_env(), timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["slots"] == 2 and out["name"] == "ray:1 node 1 CPU"
    assert [s.rsplit(":", 1)[1] for s in out["seen"]] == ["cpu0/0", "cpu0/1"], out["seen"]
    assert out["verdicts"] == ["pass", "pass"]
    assert all({"compile", "correctness"} <= set(stages) for stages in out["stages"])
    assert out["overlap"]  # both workers verified at once


def _busy_actor(address: str) -> tuple[object, str] | None:
    """The runner's actor that is verifying an attempt now (and its slot)."""
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != "kernelladder" or not entry["name"].startswith("verifier-"):
            continue
        try:
            actor = ray.get_actor(entry["name"], namespace="kernelladder")
            status = ray.get(actor.status.remote(), timeout=10)
        except Exception:
            continue  # gone meanwhile
        if status["busy"]:
            return actor, status["slot"]
    return None


def test_actor_killed_mid_attempt_is_retried_and_the_run_resumes(cluster, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "kernelladder", *_optimize(run_dir, cluster, 6)]
    proc = subprocess.Popen(
        cmd, cwd=ELSEWHERE, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ray.init(address=cluster, namespace="kernelladder", log_to_driver=False)
    killed = ""
    try:
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            found = _busy_actor(cluster)
            if found is not None:
                actor, killed = found
                ray.kill(actor)  # the actor (and its verifier's pipe) dies mid-attempt
            else:
                time.sleep(0.2)
        out, err = proc.communicate(timeout=400)
    finally:
        ray.shutdown()
        if proc.poll() is None:
            proc.kill()
    assert killed, "no attempt was caught in flight"
    assert proc.returncode == 0, err[-3000:]
    events = _events(run_dir)
    retried = _of(events, "attempt_retried")
    assert (
        len(retried) == 1 and f"Ray actor {killed} lost during the attempt" in retried[0]["reason"]
    )
    n = retried[0]["attempt"]
    tries = [e for e in _of(events, "attempt_started") if e["attempt"] == n]
    assert [t["slot"] for t in tries][0] == killed and tries[-1]["slot"] != killed
    assert tries[-1]["retry"] == 1
    started = {e["attempt"] for e in _of(events, "attempt_started")}
    judged = [e["attempt"] for e in _of(events, "verdict_ready")]
    assert sorted(judged) == sorted(started) and len(judged) == 6  # every attempt judged once
    notices = [e["message"] for e in _of(events, "notice")]
    assert any(f"Ray actor {killed}" in m and "left the pool" in m for m in notices), notices
    assert _of(events, "run_finished")[-1]["reason"] == "max-attempts"

    # resume: the run goes on on the cluster (fresh actors), numbering after the last one
    result = _cli("optimize", "--resume", str(run_dir), "--max-attempts", "8", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    events = _events(run_dir)
    assert len(_of(events, "run_reopened")) == 1
    judged = [e["attempt"] for e in _of(events, "verdict_ready")]
    assert sorted(judged) == list(range(1, 9))
    late = [e for e in _of(events, "attempt_started") if e["attempt"] > 6]
    assert late and all(e["runner"] == "ray:1 node 2 CPU" for e in late)


def test_doctor_ray_shows_the_cluster(cluster):
    result = _cli("doctor", "--ray", "--ray-address", cluster, "--device", "cpu", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    checks = json.loads(result.stdout)["checks"]
    by = {(c["scope"], c["name"]): c for c in checks}
    assert by[("ray", "cluster")]["status"] == "ok"
    assert f"{cluster}, Ray {ray.__version__}; 1 node(s)" in by[("ray", "cluster")]["detail"]
    assert "2 CPU" in by[("ray", "cluster")]["detail"]
    assert by[("ray", "dashboard")]["status"] == "warn"  # started without one
    node = next(c for c in checks if c["scope"].startswith("ray ") and c["name"] == "node")
    scope = node["scope"]
    # the package reached the node through runtime_env py_modules, not the worktree
    assert "py_modules_files" in node["detail"] and str(ROOT) not in node["detail"]
    assert by[(scope, "ray")]["detail"] == ray.__version__
    assert by[(scope, "torch")]["status"] == "ok" and by[(scope, "triton")]["status"] == "ok"


# A meta path finder that hides ray, as on a machine where it is not installed.
HIDE_RAY = r"""
import sys
class HideRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideRay())
from kernelladder.cli import main
sys.argv = ["kernelladder", *sys.argv[1:]]
sys.exit(main())
"""


@pytest.mark.parametrize(
    "args",
    [
        ("optimize", "rmsnorm", "--runner", "ray", "--ray-address", "local", "--device", "cpu"),
        ("doctor", "--ray", "--ray-address", "auto"),
    ],
    ids=["optimize", "doctor"],
)
def test_missing_ray_is_one_line_and_exit_2(args, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            HIDE_RAY,
            *args,
            *(("--run-dir", str(tmp_path / "r")) if args[0] == "optimize" else ()),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'kernelladder[ray]'" in lines[0], lines
    assert not (tmp_path / "r").exists()  # nothing was started or written


def test_nothing_imports_ray_unless_the_ray_runner_is_chosen():
    probe = r"""
import json, sys
import kernelladder.cli, kernelladder.cli.optimize, kernelladder.cli.doctor
import kernelladder.engine, kernelladder.engine.runners, kernelladder.engine.runners.ray
from kernelladder.engine.run.options import RunOptions
from kernelladder.engine.runners import make_runner
make_runner(RunOptions(op="rmsnorm", ray_address="auto", ray_slots=2), "cpu")  # built, not started
make_runner(RunOptions(op="rmsnorm"), "cpu")
print(json.dumps(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--runner", "ray"), "--runner ray needs --ray-address ADDR or KL_RAY_ADDRESS"),
        (("--ray-address", "auto", "--ray-slots", "0"), "--ray-slots must be at least 1"),
        (("--runner", "local", "--ray-address", "auto"), "go with --runner ray"),
        (("--ray-address", "auto", "--remote"), "do not go together"),
    ],
    ids=["no-address", "zero-slots", "local-with-address", "with-remote"],
)
def test_bad_ray_options_are_one_line_and_exit_2(args, message, tmp_path):
    run_dir = tmp_path / "r"
    result = _cli("optimize", "rmsnorm", *args, "--run-dir", str(run_dir), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not run_dir.exists()


def test_a_cluster_that_disappears_stops_the_run_with_the_reason(tmp_path):
    """The whole cluster shut down mid-run (its own cluster here, not the module's)."""
    run_dir = tmp_path / "run"
    with _head() as (address, head):
        cmd = [sys.executable, "-m", "kernelladder", *_optimize(run_dir, address, 40)]
        proc = subprocess.Popen(
            cmd,
            cwd=ELSEWHERE,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                if len(_of(_events(run_dir), "verdict_ready")) >= 1:
                    break
                time.sleep(0.2)
            _stop_head(head)  # the head, its GCS and every actor go
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    events = _events(run_dir)
    finished = _of(events, "run_finished")
    assert len(finished) == 1, err[-3000:]  # the run ended itself, with its log complete
    assert finished[0]["reason"] == "error"
    assert "no Ray actor left" in finished[0]["detail"], finished
    assert "Traceback" not in err
    lost = [e["message"] for e in _of(events, "notice") if "left the pool" in e["message"]]
    assert len(lost) == 2, lost  # both actors, each named with its node
    # every attempt that started was judged, or retried until the run stopped
    started = {e["attempt"] for e in _of(events, "attempt_started")}
    judged = {e["attempt"] for e in _of(events, "verdict_ready")}
    retried = {e["attempt"] for e in _of(events, "attempt_retried")}
    assert retried and started == judged | retried


# On the node's Python (every process the cluster starts), torch and triton are hidden,
# as on a node where they are not installed. This machine has them, so a test double.
NODE_WITHOUT_TORCH = r"""
import sys
class HideTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideTorch())
"""


def test_a_node_without_torch_is_named_in_one_line(tmp_path):
    hider = tmp_path / "node-site"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(NODE_WITHOUT_TORCH)
    run_dir = tmp_path / "run"
    with _head(PYTHONPATH=str(hider)) as (address, _):
        result = _cli(*_optimize(run_dir, address, 4))
        doctor = _cli("doctor", "--ray", "--ray-address", address, "--device", "cpu", "--json")
    finished = _of(_events(run_dir), "run_finished")
    assert len(finished) == 1 and finished[0]["reason"] == "error", result.stderr[-2000:]
    detail = finished[0]["detail"]
    assert detail.startswith("the runner did not start: node "), detail
    assert "has no torch and triton; the verifier needs torch and Triton on every node" in detail
    assert "Traceback" not in result.stderr
    assert doctor.returncode == 1
    checks = json.loads(doctor.stdout)["checks"]
    torch_checks = [c for c in checks if c["scope"].startswith("ray ") and c["name"] == "torch"]
    assert torch_checks and torch_checks[0]["status"] == "FAIL"


async def test_the_app_runs_on_a_local_cluster_and_names_it_in_the_header(tmp_path, monkeypatch):
    """The Textual app (its stdout/stderr captured, without file descriptors) drives a
    Ray run on a cluster it starts (`local`); the header names the cluster: nodes and
    actors per node."""
    pytest.importorskip("textual")
    from kernelladder.app.app import KernelLadderApp
    from kernelladder.engine import create_run
    from kernelladder.engine.run.options import RunOptions

    for key, value in RAY_ENV.items():
        monkeypatch.setenv(key, value)
    options = RunOptions(
        op="rmsnorm", device="cpu", ray_address="local", ray_slots=2, max_attempts=2,
        branches=2, gate="approve", run_dir=str(tmp_path / "run"),
    )  # fmt: skip
    run = create_run(options)
    app = KernelLadderApp(run=run)
    # pytest enables faulthandler; `kernelladder-tui` does not, and then ray.init enables
    # it on the app's captured stderr, which has no file descriptor
    enabled = faulthandler.is_enabled()
    faulthandler.disable()
    try:
        async with app.run_test(size=(120, 40)):
            deadline = time.monotonic() + 240
            while not run.finished and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)
            header = str(app.screen.query_one("RunHeader").render())
    finally:
        if enabled and not faulthandler.is_enabled():
            faulthandler.enable(file=sys.__stderr__)
    events = _events(tmp_path / "run")
    assert _of(events, "run_finished")[0]["reason"] == "max-attempts", _of(events, "notice")
    assert "via ray:1 node 2 CPU" in header, header
