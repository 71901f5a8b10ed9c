"""The walls around a worker (Landlock, verifier/contract/sandbox.py) and the verifier-file hashes,
through a real worker process and the real Triton interpreter on the CPU.

Each wall cheat does one forbidden thing, swallows the error and then computes the right
answer, so only the walls can fail it; the verdict must name the wall, the forbidden
thing must not have happened, and the verifier's files must hash the same afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import ROOT

from kernelladder.verifier.contract import sandbox, source_files
from kernelladder.verifier.host.client import LocalTransport, WorkerClient, WorkerUnavailable

CHEATS = ROOT / "tests" / "cheats"
SECRET = "sk-test-SANDBOX-NEVER-SHOWN-98765"
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- fake-key-material-for-the-test"

ABI, WHY_NOT = sandbox.landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 4, reason=f"Landlock ABI 4+ needed: {WHY_NOT or ABI}")


@pytest.fixture(scope="module")
def fake_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text(KEY_TEXT)
    return home


@pytest.fixture(scope="module")
def walled(fake_home):
    """(loop, client): one sandboxed CPU worker whose caller's HOME is a fake home."""
    environ = dict(os.environ, HOME=str(fake_home), ANTHROPIC_API_KEY=SECRET)
    environ.pop("XDG_CACHE_HOME", None)
    loop = asyncio.new_event_loop()
    client = WorkerClient(
        lambda: LocalTransport("cpu", environ=environ, sandbox="require"), secrets=[SECRET]
    )
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


def verify(worker, source: str, op: str = "rmsnorm"):
    loop, client = worker
    request = {"op": op, "source": source, "device": "cpu"}
    return loop.run_until_complete(client.verify(request, timeout_s=180))


def cheat(name: str) -> str:
    return (CHEATS / f"{name}.py").read_text()


def gates_text(v) -> dict:
    return {g: (r.status, r.detail) for g, r in v.gates.items()}


# --- the ctypes layer ----------------------------------------------------------------------


def test_landlock_abi_reports_a_version_or_a_reason():
    abi, why = sandbox.landlock_abi()
    assert (abi > 0 and why == "") or (abi == 0 and why)


def test_without_landlock_auto_runs_off_with_the_reason_and_require_refuses(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: (0, "the kernel has no Landlock"))
    policy = sandbox.build_policy(str(tmp_path))
    state = sandbox.apply(policy, "auto")
    assert not state.on and sandbox.describe_state(state) == "off (the kernel has no Landlock)"
    with pytest.raises(RuntimeError, match="--sandbox require: the kernel has no Landlock"):
        sandbox.apply(policy, "require")
    off = sandbox.apply(policy, "off")
    assert sandbox.describe_state(off) == "off (turned off (--sandbox off))"
    with pytest.raises(ValueError):
        sandbox.apply(policy, "bwrap")


def test_policy_keeps_homes_tmp_and_secrets_out_but_python_in(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    policy = sandbox.build_policy(str(tmp_path / "scratch"), [str(home / "cache")], home=str(home))
    assert os.path.realpath(home) in policy.unreadable
    assert {"/tmp", "/proc", "/etc/shadow"} <= set(policy.unreadable) | {"/etc/shadow"}
    granted = policy.readable + policy.readable_files
    assert any(sandbox._beneath(os.path.realpath(sys.prefix), g) for g in granted)
    assert f"/proc/{os.getpid()}" in policy.readable
    assert not any(g == "/" or sandbox._beneath(os.path.realpath(home), g) for g in policy.readable)
    assert "/etc/shadow" not in policy.readable_files


@needs_landlock
def test_applied_walls_hold_in_a_process_and_its_children(tmp_path, fake_home):
    """Apply in a child interpreter (the walls are for good), try each wall there."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    victim = tmp_path / "outside.txt"
    victim.write_text("untouched")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    script = textwrap.dedent(
        f"""
        import os, socket, subprocess, sys
        from kernelladder.verifier.contract import sandbox
        policy = sandbox.build_policy({str(scratch)!r}, home={str(fake_home)!r})
        state = sandbox.apply(policy, "require")
        print("state", sandbox.describe_state(state))
        def attempt(label, fn):
            try:
                fn()
                print(label, "allowed")
            except OSError as exc:
                print(label, "denied", exc.errno)
        attempt("write-scratch", lambda: open({str(scratch / "ok")!r}, "w").write("x"))
        attempt("write-outside", lambda: open({str(victim)!r}, "a").write("x"))
        attempt("read-ssh", lambda: open({str(fake_home / ".ssh" / "id_ed25519")!r}).read())
        attempt("read-parent-environ", lambda: open(f"/proc/{{os.getppid()}}/environ").read())
        attempt("read-own-status", lambda: open("/proc/self/status").read())
        attempt("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
        import torch, triton  # what the worker needs stays readable
        print("imports ok")
        child = subprocess.run(["sh", "-c", "echo x >> {victim}"], capture_output=True)
        print("child-write", "denied" if child.returncode else "allowed")
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    server.close()
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "state on (Landlock ABI" in out
    for line in (
        "write-scratch allowed",
        "write-outside denied 13",
        "read-ssh denied 13",
        "read-parent-environ denied 13",
        "read-own-status allowed",
        "connect denied 13",
        "imports ok",
        "child-write denied",
    ):
        assert line in out, out
    assert victim.read_text() == "untouched"


# --- through a real worker ----------------------------------------------------------------

WALL_CHEATS = {
    "wall_write_package": "write to "
    + str(ROOT / "kernelladder" / "verifier" / "worker" / "gates.py"),
    "wall_write_package_at_import": "write to "
    + str(ROOT / "kernelladder" / "verifier" / "worker" / "gates.py"),
    "wall_write_home": "write to ",
    "wall_read_ssh": "read of ",
    "wall_read_parent_environ": "read of /proc/",
}


@needs_landlock
@pytest.mark.parametrize("name,wall", sorted(WALL_CHEATS.items()))
def test_a_wall_hit_fails_at_anti_cheat_naming_the_wall(walled, fake_home, name, wall):
    before = source_files.snapshot()
    v = verify(walled, cheat(name))
    assert source_files.snapshot() == before, "the verifier's files changed"
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    detail = v.gates["anti-cheat"].detail
    assert detail.startswith("sandbox: " + wall) and "denied" in detail, detail
    assert "sandbox-wall" in v.flags
    assert v.environment["sandbox"].startswith("on (Landlock ABI")
    assert not (fake_home / "planted-by-candidate.txt").exists()
    assert KEY_TEXT not in str(v.to_dict()) and SECRET not in str(v.to_dict())


@needs_landlock
def test_a_tcp_connection_to_a_local_listener_fails(walled):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(20)

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    source = cheat("wall_connect").replace("PORT = 22", f"PORT = {port}")
    v = verify(walled, source)
    server.close()
    thread.join(5)
    assert not accepted, "the candidate reached the listener"
    assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
    assert v.gates["anti-cheat"].detail == f"sandbox: connect to 127.0.0.1:{port} denied"


def one_config(source: str) -> str:
    """The Triton interpreter cannot benchmark configs (no driver): one config on the CPU
    runs autotune's wrapper without its timing; bench/sandbox_overhead.py runs all three
    on the GPU."""
    many = "configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4)]"
    assert many in source
    return source.replace(many, "configs=[triton.Config({}, num_warps=4)]")


@needs_landlock
@pytest.mark.parametrize("name", ["honest_rmsnorm", "honest_autotune_rmsnorm"])
def test_legit_candidates_pass_inside_the_walls(walled, name):
    before = source_files.snapshot()
    source = cheat(name)
    v = verify(walled, one_config(source) if "autotune" in name else source)
    assert v.verdict == "pass", gates_text(v)
    assert v.environment["sandbox"].startswith("on (Landlock ABI")
    assert source_files.snapshot() == before


@needs_landlock
def test_hello_reports_the_sandbox_and_the_verifier_files(walled):
    loop, client = walled
    hello = loop.run_until_complete(client.hello())
    assert hello["sandbox"].startswith("on (Landlock ABI")
    assert hello["sandbox_state"]["on"] is True and hello["sandbox_state"]["abi"] == ABI
    assert hello["verifier_files"] == source_files.combined(source_files.snapshot())


def test_changed_verifier_files_fail_the_verdict_and_replace_the_worker(tmp_path):
    """Sandbox off, on a copy of the package: the hashes are the second line."""
    copy = tmp_path / "tree"
    shutil.copytree(
        ROOT / "kernelladder", copy / "kernelladder", ignore=shutil.ignore_patterns("__pycache__")
    )
    loop = asyncio.new_event_loop()
    client = WorkerClient(
        lambda: LocalTransport("cpu", sandbox="off", package_root=str(copy)), secrets=[]
    )
    try:
        hello = loop.run_until_complete(client.hello())
        assert hello["sandbox"] == "off (turned off (--sandbox off))"
        v = loop.run_until_complete(
            client.verify(
                {"op": "rmsnorm", "source": cheat("wall_write_package"), "device": "cpu"},
                timeout_s=180,
            )
        )
        assert (v.verdict, v.gate) == ("fail", "anti-cheat"), gates_text(v)
        detail = v.gates["anti-cheat"].detail
        assert (
            detail
            == "the candidate changed the verifier's files: kernelladder/verifier/worker/gates.py"
        )
        assert "verifier-files-changed" in v.flags
        assert v.gates["anti-cheat"].evidence["walls"][0].endswith("attempted (sandbox off)")
        assert not client.alive, "the worker that loaded a changed verifier was kept"
        assert (
            "the candidate was here" in (copy / "kernelladder/verifier/worker/gates.py").read_text()
        )
        # and no fresh worker is trusted with the altered verifier
        with pytest.raises(WorkerUnavailable, match="the verifier's files changed on disk"):
            loop.run_until_complete(client.hello())
    finally:
        loop.run_until_complete(client.close())
        loop.close()


@pytest.mark.skipif(ABI > 0, reason="Landlock is available here")
def test_require_refuses_to_start_without_landlock():
    async def start() -> None:
        client = WorkerClient(lambda: LocalTransport("cpu", sandbox="require"), secrets=[])
        try:
            await client.hello()
        finally:
            await client.close()

    with pytest.raises(WorkerUnavailable, match="--sandbox require"):
        asyncio.run(start())


# --- correctness at shapes the proposer has not seen ---------------------------------------


def test_unseen_shapes_are_reproducible_plausible_and_never_the_suites():
    """Reproducible from their seed, never a suite's shape, plausible sizes and dtypes
    (tests/ops/test_unseen_shapes.py holds them to the rule that chooses them against
    the suites, and to the interpreter's means on the CPU)."""
    from kernelladder.ops.registry import builtin_ops

    for spec in builtin_ops():
        suite = {
            (tuple(sorted(s.dims.items())), s.dtype) for s in spec.gpu_shapes + spec.cpu_shapes
        }
        for device in ("cpu", "cuda"):
            for seed in range(20):
                a = spec.draw_unseen_shapes(random.Random(seed), 3, device)
                assert a == spec.draw_unseen_shapes(random.Random(seed), 3, device)
                assert len(a) == 3 and len({s.label for s in a}) == 3
                for shape in a:
                    assert (tuple(sorted(shape.dims.items())), shape.dtype) not in suite
                    assert shape.label.startswith("unseen ")
                    assert shape.dims.keys() == spec.cpu_shapes[0].dims.keys()
                    assert shape.dtype in {s.dtype for s in spec.gpu_shapes + spec.cpu_shapes}
                    assert all(v >= 1 for v in shape.dims.values())
                    if device == "cpu":  # the interpreter is slow: small on the CPU
                        assert all(size <= 700 for size in shape.dims.values())
    lengths = {
        s.dims["N"]
        for seed in range(200)
        for s in builtin_ops()[1].draw_unseen_shapes(random.Random(seed), 2, "cpu")
    }
    assert any(n % 2 for n in lengths) and any(n & (n - 1) == 0 for n in lengths)


def test_kernelbench_problems_keep_their_fixed_inputs():
    from kernelladder.ops.registry import load_op

    spec = load_op(str(ROOT / "examples" / "kernelbench" / "relu_bias_scale.py"))
    assert spec.draw_unseen_shapes(random.Random(0), 3, "cpu") == ()


def _seed_with_a_length_off_the_table() -> tuple[int, str]:
    """A seed whose first unseen CPU shape has a row length that is no power of two
    (the table cheat's fast path is right at powers of two)."""
    from kernelladder.ops.registry import get_op

    spec = get_op("rmsnorm")
    for seed in range(1000):
        shapes = spec.draw_unseen_shapes(random.Random(seed), 2, "cpu")
        n = shapes[0].dims["N"]
        if n & (n - 1) and n > 2:
            return seed, shapes[0].label
    raise AssertionError("no such seed")


@needs_landlock
def test_a_kernel_correct_only_at_the_suites_lengths_fails_at_an_unseen_shape(walled):
    loop, client = walled
    source = cheat("suite_lengths_only")
    request = {"op": "rmsnorm", "source": source, "device": "cpu"}
    suite_only = loop.run_until_complete(
        client.verify({**request, "unseen_shapes": 0}, timeout_s=180)
    )
    assert suite_only.verdict == "pass", "the cheat should pass the suite alone (the hole)"
    seed, label = _seed_with_a_length_off_the_table()
    v = loop.run_until_complete(client.verify({**request, "unseen_seed": seed}, timeout_s=180))
    assert (v.verdict, v.gate) == ("fail", "correctness"), gates_text(v)
    detail = v.gates["correctness"].detail
    assert detail.startswith(f"correct on the suite, wrong at an unseen shape: {label}: "), detail
    assert v.feedback.saw.startswith("correct on the suite, wrong at an unseen shape: ")
    evidence = v.gates["correctness"].evidence
    assert evidence["unseen_seed"] == seed and evidence["unseen_shape"]["label"] == label
    assert label not in v.feedback.fence


@needs_landlock
def test_a_pass_records_the_unseen_seed_and_shapes_so_it_can_be_reproduced(walled):
    from kernelladder.ops.registry import get_op

    v = verify(walled, cheat("honest_rmsnorm"))
    assert v.verdict == "pass", gates_text(v)
    evidence = v.gates["correctness"].evidence
    drawn = get_op("rmsnorm").draw_unseen_shapes(random.Random(evidence["unseen_seed"]), 2, "cpu")
    assert evidence["unseen_shapes"] == [s.to_dict() for s in drawn]
    assert "+ 2 unseen shapes" in v.gates["correctness"].detail


def test_check_reproduces_a_verdict_from_its_unseen_seed():
    seed, label = _seed_with_a_length_off_the_table()
    proc = subprocess.run(
        [sys.executable, "-m", "kernelladder", "check", "rmsnorm"]
        + [str(CHEATS / "suite_lengths_only.py"), "--device", "cpu", "--json"]
        + ["--unseen-seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["gate"] == "correctness"
    assert verdict["gates"]["correctness"]["evidence"]["unseen_shape"]["label"] == label


def test_wall_log_names_only_a_candidates_attempts_on_the_walls(tmp_path):
    """The audit hook's judgement, called directly (installing it would last for good)."""
    home = tmp_path / "home"
    home.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    policy = sandbox.build_policy(str(scratch), home=str(home))
    log = sandbox.WallLog(policy, on=True)
    inet, unix = socket.socket(), socket.socket(socket.AF_UNIX)
    try:
        calls = [
            (
                "open",
                (str(ROOT / "kernelladder" / "verifier" / "worker" / "gates.py"), "a", os.O_WRONLY),
            ),
            ("open", (str(scratch / "ok.txt"), "w", os.O_WRONLY | os.O_CREAT)),
            ("open", (str(home / ".ssh" / "id_ed25519"), "r", os.O_RDONLY)),
            ("open", (f"/proc/{os.getppid()}/environ", "rb", os.O_RDONLY)),
            ("open", ("/proc/self/status", "r", os.O_RDONLY)),
            ("open", (sandbox.__file__, "r", os.O_RDONLY)),
            ("socket.connect", (inet, ("127.0.0.1", 9))),
            ("socket.connect", (unix, "/run/some.sock")),
            ("os.remove", (str(ROOT / "README.md"),)),
        ]
        for event, args in calls:  # not armed: the verifier's own work
            log._hook(event, args)
        assert log.take() == []
        log.armed = True
        for event, args in calls:
            log._hook(event, args)
    finally:
        inet.close()
        unix.close()
    assert log.take() == [
        f"write to {ROOT}/kernelladder/verifier/worker/gates.py denied",
        f"read of {home}/.ssh/id_ed25519 denied",
        f"read of /proc/{os.getppid()}/environ denied",
        "connect to 127.0.0.1:9 denied",
        f"removal of {ROOT}/README.md denied",
    ]


def test_doctor_tries_the_walls_here():
    from kernelladder.cli.doctor import local_sandbox_check

    off = local_sandbox_check("off")
    assert off.status == "warn" and off.detail.startswith("off (turned off (--sandbox off))")
    check = local_sandbox_check("require")
    if ABI >= 4:
        assert check.status == "ok", check
        assert check.detail.startswith(f"on (Landlock ABI {ABI}: ")
        assert check.detail.endswith("tried and denied: write outside, other /proc, tcp bind")
    else:
        assert check.status == "FAIL" and check.detail.startswith("off (")
