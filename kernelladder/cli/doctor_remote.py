"""`kernelladder doctor --remote` and `--ray`: each SSH host (the link, its host key, the
Python and GPUs there, the walls, the synced verifier) and the Ray cluster's nodes."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from kernelladder.cli.doctor_probes import (
    FAIL,
    OK,
    PROBE,
    WARN,
    Check,
    probe_answer,
    probe_checks,
    sandbox_check,
    sandbox_probe,
)

REMOTE_MIN_PYTHON = (3, 10)  # the verifier alone (ops + verifier) runs on older boxes too


async def remote_checks(
    config: Any, *, trust: bool, interactive: bool, device: str = "cuda", sandbox: str = "auto"
) -> list[Check]:
    checks: list[Check] = []
    for host in config.hosts:
        checks += await host_checks(
            host, trust=trust, interactive=interactive, device=device, sandbox=sandbox
        )
    return checks


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
            probe = probe_answer(result.stdout)
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
                answer = probe_answer(walled.stdout)
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


async def ray_checks(address: str, *, device: str = "cuda") -> list[Check]:
    """The cluster: connect, then per node its GPUs and what its Python offers (a probe
    task pinned to the node, with the package shipped as the runner ships it)."""
    from kernelladder.engine import ray_cluster

    scope = "ray"
    try:
        conn = await asyncio.to_thread(ray_cluster.connect, address)
    except ray_cluster.RayUnavailable as exc:
        return [Check(scope, "cluster", FAIL, str(exc))]
    try:
        import ray

        nodes = await asyncio.to_thread(ray_cluster.cluster_nodes)
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
        for probe in await ray_cluster.probe_nodes(nodes):
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
