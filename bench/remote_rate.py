"""Remote vs local verification on one GPU box: what the SSH runner costs.

Run on the GPU box itself (it needs no sshd: an asyncssh SSH server is started
in-process on 127.0.0.1 with throwaway keys, so the "remote" worker goes through a real
SSH connection, SFTP sync and channel, to the same GPU):

    python bench/remote_rate.py [--op rmsnorm] [--attempts 8] [--repeats 4] [--device cuda]

Needs asyncssh importable (a wheel is enough; the box has no package index) besides
what the verifier needs. Run from the repository root (it puts the repo on PYTHONPATH).

Two measurements, local worker first, then remote (each with fresh Triton/inductor
caches so neither inherits the other's compiled kernels):
  1. warm-worker latency: the op's starting candidate verified `--repeats` times
     through LocalRunner and through SSHRunner (first call and median of the rest);
  2. `kernelladder optimize OP [--remote] --max-attempts N --branches 1` end to end:
     attempts per minute over the attempts' span and over the whole wall time.
Prints a table; writes results.json, results.md and every log under $OUT (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import asyncssh  # noqa: E402  (after the repo is importable)

# --- an SSH server in this process, on loopback ------------------------------------------


class LoopbackSSHServer:
    """asyncssh server on 127.0.0.1: key auth for one throwaway key, SFTP, and exec of
    each command through /bin/sh in its own session (as sshd does)."""

    def __init__(self, base: Path, log: Path):
        self.base = base
        self.log_path = log
        self.port = 0
        self.command_env: dict[str, str] = dict(os.environ)  # what spawned commands get
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._ready = threading.Event()
        self.commands = 0

    def prepare(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        client = asyncssh.generate_private_key("ssh-ed25519")
        self.client_key_path = self.base / "client_ed25519"
        client.write_private_key(str(self.client_key_path))
        self.client_key_path.chmod(0o600)
        self.authorized = asyncssh.import_authorized_keys(client.export_public_key().decode())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.known_hosts_path = self.base / "known_hosts"
        self.known_hosts_path.write_text(
            f"[127.0.0.1]:{self.port} {self.host_key.export_public_key().decode()}"
        )

    def _log(self, text: str) -> None:
        with self.log_path.open("a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        self.commands += 1
        command = process.command or ""
        self._log(f"exec #{self.commands}: {command[:160]!r}")
        local = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(self.command_env),
            start_new_session=True,
        )
        await process.redirect(stdin=local.stdin, stdout=local.stdout, stderr=local.stderr)
        code = await local.wait()
        self._log(f"exit #{self.commands}: {code}")
        if code < 0:
            try:
                process.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))
            except ValueError:
                process.exit(255)
        else:
            process.exit(code)
        await process.wait_closed()  # runs asyncssh's cleanup of the redirected pipes

    async def _serve(self) -> None:
        self._server = await asyncssh.create_server(
            asyncssh.SSHServer,
            "127.0.0.1",
            self.port,
            server_host_keys=[self.host_key],
            authorized_client_keys=self.authorized,
            process_factory=self._handle,
            sftp_factory=True,
            encoding=None,
            allow_scp=False,
            password_auth=False,
            kbdint_auth=False,
        )
        self._ready.set()

    def start(self) -> None:
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve())
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True, name="ssh-server").start()
        if not self._ready.wait(30):
            raise RuntimeError("the in-process SSH server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)


# --- measurements --------------------------------------------------------------------------


def _user() -> str:
    """Any name works (the in-process server checks only the key); the real one reads best."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "kl"


def fresh_caches(base: Path, label: str) -> dict[str, str]:
    """Separate compile caches, so the second measurement inherits nothing."""
    triton = base / f"triton-cache-{label}"
    inductor = base / f"inductor-cache-{label}"
    for d in (triton, inductor):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    return {"TRITON_CACHE_DIR": str(triton), "TORCHINDUCTOR_CACHE_DIR": str(inductor)}


async def latency(runner: Any, op: str, device: str, repeats: int) -> dict[str, Any]:
    from kernelladder.engine import VerifyRequest
    from kernelladder.ops import registry

    spec = registry.load_op(op)
    source = _starting_source(spec, op)
    started = time.perf_counter()
    await runner.start()
    start_s = time.perf_counter() - started
    times, verdicts = [], []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            verdict = await runner.verify(
                VerifyRequest(op=registry.op_to_wire(spec), source=source, device=device)
            )
            times.append(time.perf_counter() - t0)
            verdicts.append(verdict.verdict)
    finally:
        await runner.close()
    warm = times[1:] or times
    return {
        "start_s": start_s,
        "first_s": times[0],
        "warm_median_s": statistics.median(warm),
        "warm_min_s": min(warm),
        "verdicts": verdicts,
        "describe": runner.describe(),
    }


def _starting_source(spec: Any, op: str) -> str:
    """The op's starting candidate (OpSpec.starting_candidate is its path)."""
    path = getattr(spec, "starting_candidate", None)
    if path and Path(path).is_file():
        return Path(path).read_text()
    return (REPO / "kernelladder" / "ops" / op / "start.py").read_text()


def optimize(
    op: str, device: str, attempts: int, run_dir: Path, env: dict[str, str], remote: bool, log: Path
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "kernelladder", "optimize", op, "--device", device]
    argv += ["--max-attempts", str(attempts), "--branches", "1", "--gate", "approve"]
    argv += ["--run-dir", str(run_dir), "--json"] + (["--remote"] if remote else [])
    started = time.perf_counter()
    with log.open("w") as err:
        result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - started
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x]
    first = next((e["ts"] for e in events if e["kind"] == "attempt_started"), None)
    verdicts = [e for e in events if e["kind"] == "verdict_ready"]
    last = verdicts[-1]["ts"] if verdicts else None
    span = (last - first) if first is not None and last is not None else None
    n = len(verdicts)
    speedups = [e.get("speedup") for e in verdicts if e.get("speedup") is not None]
    return {
        "exit_code": result.returncode,
        "attempts": n,
        "passed": sum(1 for e in verdicts if e["verdict"] == "pass"),
        "retried": sum(1 for e in events if e["kind"] == "attempt_retried"),
        "wall_s": wall,
        "attempt_span_s": span,
        "per_min_span": n / span * 60 if span else None,
        "per_min_wall": n / wall * 60 if wall else None,
        "best_speedup": max(speedups) if speedups else None,
        "runner": next((e.get("runner") for e in events if e["kind"] == "run_started"), None),
        "summary": _json_or_text(result.stdout),
    }


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text[-2000:]


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2f}{unit}"
    return f"{x}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rmsnorm")
    parser.add_argument("--attempts", type=int, default=8, help="optimize --max-attempts")
    parser.add_argument("--repeats", type=int, default=4, help="verifies per latency run")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=os.environ.get("OUT") or "bench-out")
    parser.add_argument("--skip-optimize", action="store_true")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kl-remote-rate-"))
    server = LoopbackSSHServer(work / "ssh", out / "ssh_server.log")
    server.prepare()
    server.start()
    remote_env = {
        "KL_SSH_TARGET": f"{_user()}@127.0.0.1:{server.port}",
        "KL_SSH_KEY": str(server.client_key_path),
        "KL_SSH_KNOWN_HOSTS": str(server.known_hosts_path),
        "KL_REMOTE_PYTHON": sys.executable,
        "KL_REMOTE_DIR": str(work / "remote"),
    }
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("KL_")}
    base_env["PYTHONPATH"] = str(REPO) + os.pathsep + base_env.get("PYTHONPATH", "")
    results: dict[str, Any] = {
        "op": args.op,
        "device": args.device,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": sys.version.split()[0],
        "asyncssh": asyncssh.__version__,
    }
    try:
        import torch
        import triton

        results["torch"], results["triton"] = torch.__version__, triton.__version__
        if torch.cuda.is_available():
            results["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # the table still says what ran
        results["versions_error"] = repr(exc)

    from kernelladder.engine import (
        LocalRunner,
        RemoteSettings,
        load_remote_config,
        make_remote_runner,
    )

    print(f"ssh server on 127.0.0.1:{server.port}; logs in {out}", flush=True)
    caches = fresh_caches(work, "latency-local")
    os.environ.update(caches)
    results["latency_local"] = asyncio.run(
        latency(LocalRunner(device=args.device), args.op, args.device, args.repeats)
    )
    print(f"local latency: {results['latency_local']}", flush=True)
    server.command_env = {**base_env, **fresh_caches(work, "latency-remote")}
    config = load_remote_config(RemoteSettings(), {**base_env, **remote_env})
    results["latency_remote"] = asyncio.run(
        latency(make_remote_runner(config, device=args.device), args.op, args.device, args.repeats)
    )
    print(f"remote latency: {results['latency_remote']}", flush=True)

    if not args.skip_optimize:
        local_env = {**base_env, **fresh_caches(work, "optimize-local")}
        results["optimize_local"] = optimize(
            args.op, args.device, args.attempts, out / "run-local", local_env, False,
            out / "optimize-local.stderr.log",
        )  # fmt: skip
        print(f"local optimize: {results['optimize_local']}", flush=True)
        server.command_env = {**base_env, **fresh_caches(work, "optimize-remote")}
        results["optimize_remote"] = optimize(
            args.op, args.device, args.attempts, out / "run-remote",
            {**base_env, **remote_env}, True, out / "optimize-remote.stderr.log",
        )  # fmt: skip
        print(f"remote optimize: {results['optimize_remote']}", flush=True)
    server.stop()
    results["ssh_commands"] = server.commands

    table = render(results)
    print(table)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "results.md").write_text(table + "\n")
    shutil.rmtree(work, ignore_errors=True)
    ok = all(
        results.get(k, {}).get("exit_code", 0) == 0 for k in ("optimize_local", "optimize_remote")
    )
    return 0 if ok else 1


def render(r: dict[str, Any]) -> str:
    lines = [
        f"Remote (SSH on loopback) vs local verification — {r.get('gpu', r['device'])}, "
        f"op {r['op']}, Python {r['python']}, torch {r.get('torch')}, triton {r.get('triton')}, "
        f"asyncssh {r['asyncssh']}, {r['date']}",
        "",
        "| measurement | local | remote (ssh) |",
        "|---|---|---|",
    ]
    lo, re_ = r.get("latency_local", {}), r.get("latency_remote", {})
    for key, label in (
        ("start_s", "runner start (connect, sync, worker up)"),
        ("first_s", "first verify (compile)"),
        ("warm_median_s", "warm verify, median"),
        ("warm_min_s", "warm verify, min"),
    ):
        lines.append(f"| {label} | {_fmt(lo.get(key), ' s')} | {_fmt(re_.get(key), ' s')} |")
    ol, orr = r.get("optimize_local"), r.get("optimize_remote")
    if ol and orr:
        for key, label in (
            ("attempts", "optimize: attempts"),
            ("passed", "optimize: passed"),
            ("retried", "optimize: retried (link lost)"),
            ("wall_s", "optimize: wall time"),
            ("per_min_span", "optimize: attempts/min (first start to last verdict)"),
            ("per_min_wall", "optimize: attempts/min (whole wall time)"),
            ("best_speedup", "optimize: best speedup"),
            ("exit_code", "optimize: exit code"),
        ):
            unit = " s" if key == "wall_s" else ""
            lines.append(f"| {label} | {_fmt(ol.get(key), unit)} | {_fmt(orr.get(key), unit)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
