"""The verifier worker: `python -m kernelladder.verifier.worker [--device cuda|cpu]`.

Long-lived; speaks JSON lines (verifier/contract/protocol.py) on a private copy of its original
stdin/stdout. fd 1 is pointed at stderr and fd 0 at /dev/null before any candidate runs,
so a candidate's prints land in the attempt's log and it cannot read or corrupt the
protocol through the standard descriptors. On the CPU it sets TRITON_INTERPRET=1 before
triton is imported and patches the interpreter's bf16 handling (interp_patch.py).

Imports only the standard library at module level: the device decides how triton loads.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import sys
import time
import traceback
from typing import Any, BinaryIO, NoReturn

from kernelladder.verifier.contract.protocol import PROTOCOL_VERSION, decode, encode
from kernelladder.verifier.contract.scratch import make_scratch

# scratch directories this worker removes as it exits (os._exit skips atexit handlers)
_owned_scratch: list[str] = []
# (process, pipe) of the janitor that removes them from outside the walls
_janitor: list[tuple[Any, int]] = []

# Runs outside the walls: waits for the worker's end of the pipe to close (the worker
# exits, or is killed), then removes the scratch directories, which the walled worker
# can empty but not remove (their parent is not its to write).
JANITOR = """\
import os, shutil, sys
fd = int(sys.argv[1])
try:
    while os.read(fd, 4096):
        pass
except OSError:
    pass
for path in sys.argv[2:]:
    shutil.rmtree(path, ignore_errors=True)
"""


class _Channel:
    """The protocol's private descriptors (taken before any candidate code runs)."""

    def __init__(self) -> None:
        self._out_fd = os.dup(1)
        in_fd = os.dup(0)
        os.dup2(2, 1)  # candidate prints go to stderr
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for fd in (self._out_fd, in_fd):
            os.set_inheritable(fd, False)
        self._in: BinaryIO = os.fdopen(in_fd, "rb")

    def send(self, message: dict[str, Any]) -> None:
        _flush_std()
        data = encode(message)
        view = memoryview(data)
        while view:
            written = os.write(self._out_fd, view)
            view = view[written:]

    def receive(self) -> bytes:
        return self._in.readline()


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _exit(code: int) -> NoReturn:
    """Leave now: a non-daemon thread a candidate started must not keep us alive."""
    _flush_std()
    for path in _owned_scratch:
        shutil.rmtree(path, ignore_errors=True)
    for process, fd in _janitor:
        os.close(fd)
        try:
            process.wait(timeout=10)
        except Exception:
            pass
    os._exit(code)


def _start_janitor() -> None:
    """The scratch this worker owns is removed from outside the walls when it ends."""
    import subprocess

    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", JANITOR, str(read_fd), *_owned_scratch],
        pass_fds=(read_fd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a kill of the worker's group leaves it to clean up
    )
    os.close(read_fd)
    _janitor.append((process, write_fd))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kernelladder.verifier.worker")
    parser.add_argument("--device", choices=("cuda", "cpu", "auto"), default="auto")
    parser.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=None,
        help="cap this process's share of GPU memory (torch's caching allocator)",
    )
    parser.add_argument("--scratch", default=None, help="directory for candidate files")
    parser.add_argument(
        "--sandbox",
        choices=("auto", "require", "off"),
        default="auto",
        help="walls around candidates (Landlock): auto = on where available, else a warning",
    )
    parser.add_argument(
        "--remove-scratch",
        action="store_true",
        help="remove the --scratch directory when the worker exits (the remote bootstrap's)",
    )
    return parser.parse_args(argv)


def preload(device: str) -> None:
    """What a worker imports before anything of it runs: torch and triton (after the
    interpreter switch) and the worker's own modules; on the CPU torch._dynamo too (the
    Verifier imports it before any integrity snapshot: the first op under a dispatch mode
    would, rebinding torch.manual_seed & co.), where a CPU worker's template saves it
    most. A worker template (template.py) does this once for the workers it forks."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    import torch  # noqa: F401
    import triton  # noqa: F401  (imported here, after the interpreter switch)

    from kernelladder.verifier.worker import gates, selftest  # noqa: F401

    if device == "cpu":
        import torch._dynamo  # noqa: F401


def _setup(device: str, args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """Import torch/triton the right way for the device; returns (hello extras, Verifier)."""
    phases: dict[str, float] = {}  # seconds per step of the start, said in the hello
    mark = [time.perf_counter()]

    def took(phase: str) -> None:
        now = time.perf_counter()
        phases[phase] = round(now - mark[0], 3)
        mark[0] = now

    preload(device)
    import torch

    from kernelladder.verifier.worker import fence, interp_patch, poison, registration_log
    from kernelladder.verifier.worker.gates import Verifier, environment_info

    extras: dict[str, Any] = {"setup_s": phases}
    took("imports")
    if device == "cpu":
        extras["interp_patches"] = interp_patch.apply()
        extras["malloc"] = poison.setup_cpu_malloc()
    else:
        torch.cuda.init()
        if args.gpu_memory_fraction:
            torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
    extras["launch_wrappers"] = fence.install_launch_counter()
    extras["registration_log"] = "on" if registration_log.REGISTRATIONS.install() else "absent"
    took("device")
    from kernelladder.verifier.worker import selftest

    try:
        extras["selftest"] = selftest.run(device)
    except Exception as exc:
        extras["selftest"] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    try:
        extras["custom_ops"] = selftest.warm_custom_ops(device)
    except Exception as exc:  # candidates that define operators may then be judged harshly
        extras["custom_ops"] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    extras["poison"] = poison.poison_check(device)
    took("selftest")
    env = environment_info(device)
    env["poison"] = extras["poison"]
    env["selftest"] = extras["selftest"]
    if device == "cpu":
        applied = extras["interp_patches"]
        env["interp_patches"] = sorted(k for k, v in applied.items() if v == "applied")
        skipped = {k: v for k, v in applied.items() if v != "applied"}
        if skipped:
            env["interp_patches_skipped"] = skipped
    from kernelladder.ops import registry
    from kernelladder.verifier.contract import sandbox, source_files

    registry.builtin_ops()  # every op imported before the walls go up
    files = source_files.snapshot()
    state, walls = _wall_in(args, sandbox)
    env["sandbox"] = sandbox.describe_state(state)
    extras["sandbox_state"] = state.to_dict()
    extras["verifier_files"] = source_files.combined(files)
    took("ops_and_walls")
    try:
        env["compilers"] = selftest.warm_compilers(device)
    except Exception as exc:  # the baselines will say what fails, if anything does
        env["compilers"] = f"not warmed: {type(exc).__name__}: {str(exc)[:200]}"
    took("compilers")
    verifier = Verifier(device, args.scratch, env)
    verifier.watch(walls, files)
    took("verifier")
    return {**extras, **env}, verifier


def _wall_in(args: argparse.Namespace, sandbox: Any) -> tuple[Any, Any]:
    """Put up the walls (no candidate code has run yet); the audit log naming them."""
    from kernelladder.verifier.contract.env import CALLER_HOME_VAR, compile_cache_dirs
    from kernelladder.verifier.contract.source_files import package_dir

    scratch = os.path.realpath(args.scratch)
    caches = []
    for name, default in compile_cache_dirs().items():
        path = os.path.realpath(os.environ.get(name) or default)
        if _too_wide(path, scratch, package_dir(), os.environ.get(CALLER_HOME_VAR, "")):
            path = os.path.join(scratch, "caches", name.lower())  # walls stay tight
        os.environ[name] = path
        os.makedirs(path, exist_ok=True)
        caches.append(path)
    home = os.environ.get(CALLER_HOME_VAR) or None
    policy = sandbox.build_policy(
        scratch, caches, extra_readable=[os.path.dirname(package_dir())], home=home
    )
    if _owned_scratch and args.sandbox != "off" and sandbox.landlock_abi()[0] > 0:
        _start_janitor()
    state = sandbox.apply(policy, args.sandbox)
    if not state.on:
        print(f"kernelladder worker: WARNING: sandbox off ({state.reason})", file=sys.stderr)
    sys.dont_write_bytecode = True  # a lazy import's .pyc write is no wall a candidate hit
    walls = sandbox.WallLog(policy, on=state.on)
    walls.install()
    return state, walls


def _too_wide(cache: str, scratch: str, package: str, home: str) -> bool:
    """A cache dir that holds the verifier, a home or the root would open the walls."""
    homes = {os.path.realpath(h) for h in (home, os.path.expanduser("~")) if h}
    if cache == "/" or cache in homes or scratch.startswith(cache.rstrip("/") + "/"):
        return True
    return package == cache or package.startswith(cache.rstrip("/") + "/")


def _claim_scratch(args: argparse.Namespace) -> str:
    """The candidate files' directory; the ones this worker must remove as it exits."""
    if not args.scratch:  # a remote worker started by hand: its own scratch
        _owned_scratch.append(make_scratch())
        return _owned_scratch[-1]
    if args.remove_scratch:
        _owned_scratch.append(args.scratch)
    return args.scratch


def _await_go(channel: _Channel, req_id: Any) -> dict[str, Any]:
    """Block until the client gives this request the GPU ("go", which may carry what
    other workers on this GPU measured since the request: "known"); a client that went
    away or asked for a shutdown ends the worker (nothing else is sent while it waits)."""
    while True:
        line = channel.receive()
        if not line:
            _exit(0)
        try:
            msg = decode(line)
        except Exception:
            continue
        kind = msg.get("type")
        if kind == "go" and msg.get("id") == req_id:
            return msg
        if kind == "shutdown":
            _exit(0)
        if kind == "ping":
            channel.send({"type": "pong", "id": msg.get("id")})


def _prepare(channel: _Channel, verifier: Any, msg: dict[str, Any], device: str) -> None:
    """A "prepare" request: torch.compile's baselines of an op compiled at every shape of
    its suite, the GPU held as measured.BASELINES_GPU says (a stage, as a verification's),
    before any candidate comes; answered "prepared" with the seconds it took (or why not)."""
    from kernelladder.verifier.worker.gates import VerifyOptions
    from kernelladder.verifier.worker.measured import BASELINES_GPU

    req_id = msg.get("id")
    try:
        opts = VerifyOptions.from_request({**msg, "source": ""}, device)
        from kernelladder.ops.registry import op_from_wire

        spec = op_from_wire(opts.op)
        shapes = spec.shapes_for(opts.device, opts.suite)
        if verifier.baselines_unprepared(spec, shapes):
            channel.send(
                {"type": "stage", "id": req_id, "stage": "baselines", "gpu": BASELINES_GPU}
            )
            _await_go(channel, req_id)
            seconds = verifier.prepare_baselines(spec, shapes, (opts.seeds or (0,))[0])
        else:
            seconds = 0.0
        channel.send({"type": "prepared", "id": req_id, "seconds": round(seconds, 3)})
    except Exception as exc:
        channel.send({"type": "prepared", "id": req_id, "error": f"{type(exc).__name__}: {exc}"})


def _idle(device: str) -> None:
    """Before the worker waits in the keeper for the next run: the memory torch's caching
    allocator holds for tensors already freed goes back to the GPU (what the worker
    keeps between candidates -- compiled baselines, the timer's buffers -- stays)."""
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not faulthandler.is_enabled():  # a segfault names itself in the stderr tail
        faulthandler.enable(file=sys.stderr)
    channel = _Channel()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        args.scratch = _claim_scratch(args)  # before setup, so a failed setup removes it too
        extras, verifier = _setup(device, args)
    except Exception as exc:
        channel.send({"type": "error", "id": None, "message": f"worker setup failed: {exc!r}"})
        traceback.print_exc()
        return 3
    from kernelladder.verifier.contract.verdict import fault_verdict
    from kernelladder.verifier.worker.gates import VerifyOptions

    hello = {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "python": extras.get("python"),
        "torch": extras.get("torch"),
        "triton": extras.get("triton"),
        "device": device,
        "gpu": extras.get("gpu"),
        "gpus": extras.get("gpus", 0),
        **{
            k: v for k, v in extras.items() if k not in ("python", "torch", "triton", "gpu", "gpus")
        },
    }
    channel.send(hello)
    while True:
        line = channel.receive()
        if not line:
            return 0  # the client went away
        if not line.strip():
            continue
        try:
            msg = decode(line)
        except Exception as exc:
            channel.send({"type": "error", "id": None, "message": f"bad request: {exc}"})
            continue
        kind, req_id = msg.get("type"), msg.get("id")
        if kind == "ping":
            channel.send({"type": "pong", "id": req_id})
        elif kind == "shutdown":
            return 0
        elif kind == "idle":  # handed to the keeper (verifier/host/keeper.py) until the next run
            _idle(device)
            channel.send({"type": "idled", "id": req_id})
        elif kind == "prepare":  # torch.compile's baselines for an op, ahead of its requests
            _prepare(channel, verifier, msg, device)
        elif kind == "verify":
            try:
                opts = VerifyOptions.from_request(msg, device)
            except Exception as exc:
                channel.send(
                    {"type": "error", "id": req_id, "message": f"bad verify request: {exc}"}
                )
                continue

            def progress(gate: str, message: str, req_id: Any = req_id) -> None:
                channel.send({"type": "progress", "id": req_id, "gate": gate, "message": message})

            def stage(name: str, gpu: str, req_id: Any = req_id) -> Any:
                channel.send({"type": "stage", "id": req_id, "stage": name, "gpu": gpu})
                if gpu != "none":
                    return _await_go(channel, req_id).get("known")
                return None

            retire = False
            try:
                outcome = verifier.verify(opts, progress, stage)  # stages: pipelined only
                verdict, recycle, retire = outcome.verdict, outcome.recycle, outcome.retire
            except BaseException as exc:  # a verifier bug must still answer
                traceback.print_exc()
                from kernelladder.verifier.worker.gates import source_hash

                verdict = fault_verdict(
                    kind="crash",
                    op=str(opts.op if isinstance(opts.op, str) else "kernelbench"),
                    device=device,
                    source_hash=source_hash(opts.source),
                    detail=f"verifier internal error: {type(exc).__name__}: {str(exc)[:300]}",
                )
                recycle = True
            reply = {"type": "verdict", "id": req_id, "verdict": verdict.to_dict()}
            reply["recycle"] = recycle
            if retire and not recycle:
                reply["retire"] = True  # the client replaces this worker once it is quiet
            channel.send(reply)
            if recycle:
                _exit(0)  # threads or patches a candidate left behind die with us
        else:
            channel.send({"type": "error", "id": req_id, "message": f"unknown type {kind!r}"})


if __name__ == "__main__":
    _exit(main())
