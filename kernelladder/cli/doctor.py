"""`kernelladder doctor [--remote] [--trust] [--json]`: what a run needs, checked.

Local: Python, torch, triton, numpy, the GPUs and their names, the optional parts (the
TUI, the API and SSH clients) and the verifier workers kept warm for the next local run
(--stop-workers stops them). With --remote, for each configured host: the SSH
link (host key, key auth) and its round-trip time, the remote Python with torch, triton
and its GPUs (inside the container when one is set), the remote directory and whether
the synced verifier is current. Exit 1 when something a run needs is missing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from kernelladder.cli import UsageError
from kernelladder.cli.common import (
    SANDBOX_ENV,
    add_remote_arguments,
    add_sandbox_argument,
    load_remote,
    remote_requested,
)
from kernelladder.verifier.host import calibration

OK, WARN, FAIL = "ok", "warn", "FAIL"
MIN_PYTHON = (3, 11)
REMOTE_MIN_PYTHON = (3, 10)  # the verifier alone (ops + verifier) runs on older boxes too

# Run by the interpreter being checked (here, or on the box with its login environment);
# prints one JSON object. The same code for both, so both are judged alike.
PROBE = """\
import json, os, platform, sys
out = {"python": platform.python_version(), "executable": sys.executable, "gpus": []}
out["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
for name in ("torch", "triton", "numpy"):
    try:
        out[name] = getattr(__import__(name), "__version__", "?")
    except Exception as exc:
        out[name] = None
        out[name + "_error"] = (type(exc).__name__ + ": " + str(exc))[:200]
try:
    import torch
    out["cuda"] = bool(torch.cuda.is_available())
    out["cuda_version"] = torch.version.cuda
    if out["cuda"]:
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as exc:
    out["cuda"] = False
    out["cuda_error"] = (type(exc).__name__ + ": " + str(exc))[:200]
print(json.dumps(out))
"""


# The walls a worker would get, tried in a throwaway child of the interpreter being
# checked: verifier/contract/sandbox.py's own source (stdlib only, so it runs on a box before any
# sync) followed by this footer; prints one JSON object.
SANDBOX_PROBE_FOOTER = """
import json as _json, os as _os, shutil as _shutil, socket as _socket, tempfile as _tempfile
_parent = _tempfile.mkdtemp(prefix="kl-doctor-")
_scratch = _os.path.join(_parent, "scratch")
_os.mkdir(_scratch)
_read, _write = _os.pipe()
_pid = _os.fork()
if _pid == 0:
    _out = {}
    try:
        _state = apply(build_policy(_scratch), _MODE)
        _out = {"on": _state.on, "abi": _state.abi, "line": describe_state(_state)}
        _out["walls"] = list(_state.walls)
        _tried = {}
        def _try(name, fn):
            try:
                fn()
                _tried[name] = "allowed"
            except OSError:
                _tried[name] = "denied"
        _try("write in scratch", lambda: open(_os.path.join(_scratch, "ok"), "w").close())
        _try("write outside", lambda: open(_os.path.join(_parent, "outside"), "w").close())
        _try("other /proc", lambda: open("/proc/%d/environ" % _os.getppid(), "rb").read(1))
        _try("tcp bind", lambda: _socket.socket().bind(("127.0.0.1", 0)))
        _out["tried"] = _tried
    except Exception as _exc:
        _out = {"on": False, "line": "off (%s)" % str(_exc)[:200], "error": True}
    _os.write(_write, _json.dumps(_out).encode())
    _os._exit(0)
_os.close(_write)
_data = b""
while True:
    _chunk = _os.read(_read, 65536)
    if not _chunk:
        break
    _data += _chunk
_os.waitpid(_pid, 0)
_shutil.rmtree(_parent, ignore_errors=True)
print(_data.decode() or _json.dumps({"on": False, "line": "off (the probe died)"}))
"""


def sandbox_probe(mode: str = "auto") -> str:
    """Python source that tries the walls (see SANDBOX_PROBE_FOOTER)."""
    from pathlib import Path

    from kernelladder.verifier.contract import sandbox

    source = Path(sandbox.__file__).read_text(encoding="utf-8")
    return source + f"\n_MODE = {mode!r}\n" + SANDBOX_PROBE_FOOTER


def sandbox_check(scope: str, probe: dict[str, Any], mode: str = "auto") -> Check:
    """On: OK with the ABI, the walls and what the probe tried; off: WARN (FAIL under
    --sandbox require), with the reason."""
    line = str(probe.get("line") or "off (no answer from the probe)")
    if probe.get("on"):
        tried = probe.get("tried") or {}
        held = [k for k in ("write outside", "other /proc", "tcp bind") if tried.get(k) == "denied"]
        broken = [
            k for k in ("write outside", "other /proc", "tcp bind") if tried.get(k) == "allowed"
        ]
        detail = line + ("; tried and denied: " + ", ".join(held) if held else "")
        if broken or tried.get("write in scratch") != "allowed":
            why = ", ".join(broken) or "writing the scratch directory was denied"
            return Check(scope, "sandbox", FAIL, f"{detail}; NOT walled as expected: {why}")
        return Check(scope, "sandbox", OK, detail)
    status = FAIL if mode == "require" else WARN
    return Check(
        scope,
        "sandbox",
        status,
        f"{line}: candidates run without walls"
        + ("" if mode == "require" else " (--sandbox require refuses to run so)"),
    )


def local_sandbox_check(mode: str = "auto") -> Check:
    try:
        result = subprocess.run(
            [sys.executable, "-c", sandbox_probe(mode)], capture_output=True, text=True, timeout=60
        )
        probe = json.loads(result.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        probe = {"on": False, "line": f"off (the sandbox probe failed: {exc})"}
    return sandbox_check("local", probe, mode)


@dataclass(frozen=True)
class Check:
    scope: str  # "local" or a host label
    name: str
    status: str  # OK | WARN | FAIL
    detail: str


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check what a run needs (Python, torch, triton, GPUs; with --remote, the SSH hosts)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--remote", action="store_true", help="also check the SSH host(s)")
    p.add_argument(
        "--trust",
        action="store_true",
        help="add an UNKNOWN host key to known_hosts after showing its fingerprint "
        "(a changed key is never trusted)",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="what remote runs will use: cuda needs the configured GPUs (default), cpu the "
        "Triton interpreter only",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure this machine's GPU copy and matmul rates again (they are kept on disk "
        "per GPU, driver and torch, and re-measured after "
        f"{int(calibration.STALE_DAYS)} days)",
    )

    p.add_argument(
        "--stop-workers",
        action="store_true",
        help="stop the verifier workers kept warm for the next local run (--keep-workers), "
        "and the keeper holding them: their GPU memory is freed",
    )

    add_sandbox_argument(
        p,
        help_text="the walls runs will ask for: require makes a missing sandbox a failure "
        f"(default: {SANDBOX_ENV}, else auto)",
    )

    add_remote_arguments(p, with_remote_flag=False)

    p.add_argument(
        "--proposer",
        choices=("openai",),
        default=None,
        help="also ask a proposer's server: openai lists the models at --base-url",
    )
    p.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the OpenAI-compatible server for --proposer openai (default: OPENAI_BASE_URL, "
        "else OpenAI's; key from OPENAI_API_KEY)",
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help="also check the Ray cluster (--ray-address or KL_RAY_ADDRESS): its nodes, "
        "GPUs per node, Ray and torch versions on the nodes, the dashboard",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster (env KL_RAY_ADDRESS): auto, local, HOST:PORT; implies --ray",
    )
    p.set_defaults(func=run)


def run(args: Any) -> int:
    if args.base_url is not None and args.proposer is None:
        raise UsageError("--base-url goes with --proposer openai")
    remote = remote_requested(args)
    if args.trust and not remote:
        raise UsageError("--trust applies to --remote")
    config = load_remote(args) if remote else None  # UsageError (one line) on a bad setting
    ray_address = _ray_address(args)
    mode = sandbox_mode(args)
    checks = local_checks()
    checks.append(rates_check(args.recalibrate))
    checks.append(local_sandbox_check(mode))
    checks.append(kept_workers_check(stop=args.stop_workers))
    if config is not None:
        checks += asyncio.run(
            remote_checks(
                config, trust=args.trust, interactive=_tty(), device=args.device, sandbox=mode
            )
        )
    if ray_address is not None:
        checks += asyncio.run(ray_checks(ray_address, device=args.device))
    if args.proposer == "openai":
        checks.append(asyncio.run(openai_check(args.base_url)))
    if args.json:
        print(json.dumps({"ok": all_ok(checks), "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        print_table(checks)
    return 0 if all_ok(checks) else 1


def all_ok(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)


# --- local ------------------------------------------------------------------------------


def local_checks() -> list[Check]:
    checks = [
        Check(
            "local",
            "python",
            OK if sys.version_info >= MIN_PYTHON else FAIL,
            f"{sys.version.split()[0]} ({sys.executable})"
            + ("" if sys.version_info >= MIN_PYTHON else "; needs >= 3.11"),
        )
    ]
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
        )
        probe = json.loads(result.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        return [*checks, Check("local", "torch", FAIL, f"probe failed: {exc}")]
    checks += probe_checks("local", probe, min_python=None, gpus_needed=None)
    checks.append(ncu_check(bool(probe.get("gpus"))))
    for module, why in (
        ("rich", "terminal output"),
        ("textual", "the TUI"),
        ("networkx", "the strategy graph"),
        ("asyncssh", "--remote"),
        ("anthropic", "--proposer api"),
        ("openai", "--proposer openai"),
        ("textual_serve", "kernelladder serve"),
        ("ray", "--runner ray"),
    ):
        version = _module_version(module)
        status = OK if version else (FAIL if module in ("rich", "networkx") else WARN)
        checks.append(Check("local", module, status, version or f"not installed ({why})"))
    return checks


async def openai_check(base_url: str | None) -> Check:
    """The models an OpenAI-compatible server lists (GET /models)."""
    if _module_version("openai") is None:
        return Check("local", "openai server", FAIL, "openai not installed (pip install openai)")
    from kernelladder.engine import ProposerError, list_models

    try:
        url, names = await list_models(base_url)
    except ProposerError as exc:
        return Check("local", "openai server", FAIL, str(exc))
    if not names:
        return Check("local", "openai server", WARN, f"{url} serves no model")
    shown = ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
    return Check("local", "openai server", OK, f"{url} serves {shown}")


RATES_PROBE = """\
import json, torch
from kernelladder.verifier.worker.timing import GpuTimer
print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "rates": GpuTimer("cuda").rates()}))
"""


def rates_check(recalibrate: bool) -> Check:
    """The GPU rates kept on disk (calibration.py); with recalibrate, dropped and measured
    again on this machine's first GPU."""
    path = calibration.cache_file()
    if not recalibrate:
        entries = calibration.entries(path)
        if not entries:
            return Check("local", "gpu rates", OK, f"none kept yet ({path}): a run measures them")
        dates = ", ".join(
            f"{e.get('gpu')} ({str(e.get('measured_at'))[:10]})" for e in entries.values()
        )
        return Check("local", "gpu rates", OK, f"kept for {dates}; --recalibrate measures again")
    dropped = calibration.forget(path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", RATES_PROBE], capture_output=True, text=True, timeout=300
        )
        measured = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return Check(
            "local", "gpu rates", WARN, f"{dropped} kept dropped; not measured (no GPU here?)"
        )
    identity = calibration.GpuIdentity(
        str(measured["gpu"]), calibration.driver_version(), str(measured["torch"])
    )
    rates = {k: float(v) for k, v in measured["rates"].items()}
    kept = calibration.write_rates(identity, rates, path=path)
    copy = rates.get("copy")
    line = (f"measured on {identity.gpu}: copy {copy / 1e9:.2f} TB/s" if copy else "measured") + (
        "" if kept else f" (not kept: {path} is not writable)"
    )
    return Check("local", "gpu rates", OK, line)


def kept_workers_check(stop: bool = False) -> Check:
    """The verifier workers the keeper holds for the next local run (verifier/host/keeper.py):
    pid, device, age, recipe; with `stop`, the keeper stopped and they with it."""
    from kernelladder.verifier.host import keeper

    where = keeper.socket_path()
    try:
        if stop:
            stopped = keeper.stop()
            if stopped is None:
                return Check("local", "kept workers", OK, f"none: no keeper runs ({where})")
            pids = ", ".join(map(str, stopped)) or "none held"
            return Check(
                "local", "kept workers", OK, f"stopped the keeper and its workers ({pids})"
            )
        workers = keeper.list_kept()
    except (keeper.KeeperError, OSError) as exc:
        return Check("local", "kept workers", WARN, f"the keeper at {where}: {exc}")
    if not workers:
        return Check("local", "kept workers", OK, f"none ({where})")
    shown = "; ".join(
        f"pid {w.get('pid')} on "
        + (f"cuda:{w['cuda_device']}" if w.get("cuda_device") is not None else str(w.get("device")))
        + f", kept {float(w.get('age_s') or 0):.0f} s ago, {float(w.get('left_s') or 0):.0f} s "
        f"left, recipe {str(w.get('recipe'))[:12]}"
        for w in workers
    )
    return Check(
        "local",
        "kept workers",
        OK,
        f"{len(workers)} kept for the next local run: {shown} (--stop-workers stops them)",
    )


def ncu_check(has_gpu: bool) -> Check:
    """Nsight Compute for --profile auto: found, and able to read the GPU's counters."""
    from kernelladder.verifier.host.profile import availability, find_ncu

    ncu = find_ncu()
    if ncu is None:
        return Check("local", "ncu", WARN, "not found: runs go on without profiles")
    if not has_gpu:
        return Check("local", "ncu", WARN, f"{ncu}: no GPU here to profile on")
    ok, line = availability(ncu)
    return Check(
        "local", "ncu", OK if ok else WARN, line if ok else f"{line}: runs go on without profiles"
    )


def _module_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def probe_checks(
    scope: str, probe: dict[str, Any], *, min_python: tuple[int, int] | None, gpus_needed: Any
) -> list[Check]:
    """Checks from a PROBE result. gpus_needed: GPU indices a host's config lists (they
    must exist), or None for the local machine (no GPU: the CPU interpreter is used)."""
    checks = []
    if min_python is not None:
        version = tuple(int(p) for p in str(probe.get("python", "0.0")).split(".")[:2])
        good = version >= min_python
        checks.append(
            Check(
                scope,
                "python",
                OK if good else FAIL,
                f"{probe.get('python')} ({probe.get('executable')})"
                + ("" if good else f"; needs >= {'.'.join(map(str, min_python))}"),
            )
        )
    for name in ("torch", "triton", "numpy"):
        version = probe.get(name)
        detail = version or f"missing: {probe.get(name + '_error', 'not importable')}"
        checks.append(Check(scope, name, OK if version else FAIL, detail))
    gpus = list(probe.get("gpus") or [])
    if gpus:
        names = ", ".join(f"{i}: {n}" for i, n in enumerate(gpus))
        detail = f"{len(gpus)} ({names}); CUDA {probe.get('cuda_version')}"
        status = OK
        if gpus_needed is not None:
            absent = [g for g in gpus_needed if g >= len(gpus)]
            if absent:
                status, detail = FAIL, f"configured GPU(s) {absent} absent; the box has {detail}"
        checks.append(Check(scope, "gpus", status, detail))
    elif gpus_needed is None:
        why = probe.get("cuda_error") or "no CUDA device"
        checks.append(
            Check(scope, "gpus", WARN, f"none ({why}): the CPU interpreter, speed not measured")
        )
    else:
        why = probe.get("cuda_error") or "torch sees no CUDA device"
        checks.append(Check(scope, "gpus", FAIL, f"none ({why})"))
    return checks


def gpu_map_check(host: Any, visible: Any, device: str) -> Check:
    """The box's CUDA_VISIBLE_DEVICES and the devices the configured GPU indices become
    (workers get the same mapping: runners.ssh.config.physical_gpus)."""
    from kernelladder.engine import RemoteConfigError, physical_gpus

    visible = visible if isinstance(visible, str) else None
    shown = "CUDA_VISIBLE_DEVICES not set" if visible is None else f"CUDA_VISIBLE_DEVICES={visible}"
    indices = ",".join(map(str, host.gpus))
    try:
        mapped = physical_gpus(host.gpus, visible, where=host.label)
    except RemoteConfigError as exc:
        # a CPU run uses no GPU, so a bad index only matters to a cuda run
        return Check(host.label, "gpu map", FAIL if device == "cuda" else WARN, str(exc))
    detail = f"{shown}; gpus {indices} -> physical {','.join(mapped)}"
    return Check(host.label, "gpu map", OK, detail)


# --- remote -----------------------------------------------------------------------------


async def remote_checks(
    config: Any, *, trust: bool, interactive: bool, device: str = "cuda", sandbox: str = "auto"
) -> list[Check]:
    checks: list[Check] = []
    for host in config.hosts:
        checks += await host_checks(
            host, trust=trust, interactive=interactive, device=device, sandbox=sandbox
        )
    return checks


def sandbox_mode(args: Any) -> str:
    from kernelladder.verifier.contract.sandbox import mode_from_env

    return getattr(args, "sandbox", None) or mode_from_env()


async def host_checks(
    host: Any, *, trust: bool, interactive: bool, device: str = "cuda", sandbox: str = "auto"
) -> list[Check]:
    from kernelladder.engine import (
        HostKeyError,
        HostLink,
        RemoteError,
        python_command,
        trust_host_key,
    )

    scope = host.label
    checks: list[Check] = []
    link = HostLink(host)
    try:
        try:
            await link.connect()
        except HostKeyError as exc:
            if exc.changed or not trust or exc.key is None:
                return [Check(scope, "ssh", FAIL, str(exc))]
            if not _confirm_trust(exc, interactive):
                return [Check(scope, "ssh", FAIL, f"host key not trusted: {exc}")]
            trust_host_key(host.known_hosts, exc.host, exc.port, exc.key)
            checks.append(
                Check(
                    scope, "host key", OK, f"trusted {exc.fingerprint}, added to {host.known_hosts}"
                )
            )
            await link.connect()
        rtt = await link.round_trip_s()
        checks.append(Check(scope, "ssh", OK, f"{host.target}; round trip {rtt * 1000:.1f} ms"))
        command = python_command(host, python=link.python or host.python, code=PROBE)
        result = await link.run(command, timeout_s=max(host.command_timeout_s, 120))
        where = f"in container {host.container}" if host.container else "on the box"
        if host.container:
            status = OK if result.exit_status == 0 else FAIL
            detail = (
                f"docker exec into {host.container} works"
                if status == OK
                else f"docker exec into {host.container} failed: {_last_line(result.stderr)}"
            )
            checks.append(Check(scope, "container", status, detail))
        try:
            probe = json.loads(str(result.stdout).strip().splitlines()[-1])
        except (ValueError, IndexError):
            checks.append(
                Check(
                    scope,
                    "python",
                    FAIL,
                    f"{link.python} {where} did not run: {_last_line(result.stderr)} "
                    "(set KL_REMOTE_PYTHON; see REMOTE_SETUP.md)",
                )
            )
        else:
            checks += probe_checks(
                scope,
                probe,
                min_python=REMOTE_MIN_PYTHON,
                gpus_needed=host.gpus if device == "cuda" else None,
            )
            checks.append(gpu_map_check(host, probe.get("cuda_visible_devices"), device))
            command = python_command(
                host, python=link.python or host.python, code=sandbox_probe(sandbox)
            )
            walled = await link.run(command, timeout_s=max(host.command_timeout_s, 60))
            try:
                answer = json.loads(str(walled.stdout).strip().splitlines()[-1])
            except (ValueError, IndexError):
                answer = {"on": False, "line": f"off (probe failed: {_last_line(walled.stderr)})"}
            checks.append(sandbox_check(scope, answer, sandbox))
        state = await link.sync_state()
        if not state["exists"]:
            detail = f"{state['remote_dir']} absent: the first run creates it and sends {state['would_send']} files"
            status = OK
        elif state["in_sync"]:
            detail, status = (
                f"{state['remote_dir']}: verifier current (tree {state['local_tree']})",
                OK,
            )
        else:
            detail = (
                f"{state['remote_dir']}: the next run sends {state['would_send']} changed files"
            )
            status = OK
        checks.append(Check(scope, "remote dir", status, detail))
    except RemoteError as exc:
        checks.append(Check(scope, "ssh", FAIL, str(exc)))
    finally:
        await link.close()
    return checks


# --- Ray ---------------------------------------------------------------------------------


def _ray_address(args: Any) -> str | None:
    """The cluster `--ray` checks (UsageError, one line, for a missing ray or address)."""
    from kernelladder.engine import MISSING_RAY, ray_installed, resolve_address

    if not args.ray and args.ray_address is None:
        return None
    address = resolve_address(args.ray_address)
    if not address:
        raise UsageError(
            "--ray needs --ray-address ADDR or KL_RAY_ADDRESS (auto, local, HOST:PORT)"
        )
    if not ray_installed():
        raise UsageError(MISSING_RAY)
    return address


async def ray_checks(address: str, *, device: str = "cuda") -> list[Check]:
    """The cluster: connect, then per node its GPUs and what its Python offers (a probe
    task pinned to the node, with the package shipped as the runner ships it)."""
    from kernelladder.engine import ray_runner

    scope = "ray"
    try:
        conn = await asyncio.to_thread(ray_runner.connect, address)
    except ray_runner.RayUnavailable as exc:
        return [Check(scope, "cluster", FAIL, str(exc))]
    try:
        import ray

        nodes = await asyncio.to_thread(ray_runner.cluster_nodes)
        gpus = sum(n["gpus"] for n in nodes)
        per_node = ", ".join(f"{n['ip']}: {n['gpus']} GPU, {n['cpus']} CPU" for n in nodes)
        status = OK
        detail = f"{conn['address']}, Ray {ray.__version__}; {len(nodes)} node(s) ({per_node})"
        if device == "cuda" and gpus == 0:
            status = FAIL
            detail += "; no GPUs (--device cpu --ray-slots N runs CPU actors)"
        checks = [Check(scope, "cluster", status, detail)]
        dashboard = conn.get("dashboard") or ""
        checks.append(
            Check(
                scope,
                "dashboard",
                OK if dashboard else WARN,
                dashboard or "not running (ray[default] on the head serves it)",
            )
        )
        for probe in await ray_runner.probe_nodes(nodes):
            where = f"ray {probe['ip']}"
            host = probe.get("hostname") or "?"
            if probe.get("error"):
                checks.append(Check(where, "node", FAIL, f"{host}: {probe['error']}"))
                continue
            checks.append(
                Check(
                    where,
                    "node",
                    OK,
                    f"{host}: {probe['ray_gpus']} GPU, {probe['cpus']} CPU; "
                    f"the package ships to {probe.get('package')}",
                )
            )
            same = probe.get("ray") == ray.__version__
            checks.append(
                Check(
                    where,
                    "ray",
                    OK if same else WARN,
                    f"{probe.get('ray')}" + ("" if same else f" (this machine: {ray.__version__})"),
                )
            )
            needed = list(range(probe["ray_gpus"])) if device == "cuda" else None
            checks += probe_checks(
                where, probe, min_python=REMOTE_MIN_PYTHON, gpus_needed=needed or None
            )
        return checks
    finally:
        if conn.get("owned"):
            await asyncio.to_thread(ray.shutdown)


def _confirm_trust(exc: Any, interactive: bool) -> bool:
    print(f"{exc.host}:{exc.port} presents host key {exc.fingerprint}", file=sys.stderr)
    if not interactive:
        return True  # --trust on a non-terminal is the person's consent
    answer = input("Trust this key and add it to known_hosts? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _last_line(text: Any) -> str:
    lines = [line for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def print_table(checks: list[Check]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="kernelladder doctor", show_lines=False)
    table.add_column("where")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    style = {OK: "green", WARN: "yellow", FAIL: "bold red"}
    for c in checks:
        table.add_row(
            escape(c.scope), c.name, f"[{style[c.status]}]{c.status}[/]", escape(c.detail)
        )
    console = Console()
    console.print(table)
    failed = [c for c in checks if c.status == FAIL]
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed[/]: a run needs them")
    else:
        console.print("[green]ready[/]")
