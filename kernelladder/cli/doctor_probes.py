"""What every `kernelladder doctor` check is made of: a Check and its status, the probe a
Python runs (here, on an SSH box, on a Ray node) and the checks read from its answer, and
the probe of the walls a worker would get there."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    scope: str  # "local" or a host label
    name: str
    status: str  # OK | WARN | FAIL
    detail: str


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


# what running a probe here and reading its answer may raise
PROBE_FAILED = (subprocess.SubprocessError, OSError, ValueError, IndexError)


def probe_answer(output: Any) -> dict[str, Any]:
    """A probe's answer: the JSON object on the last line it printed (ValueError or
    IndexError when there is none)."""
    return json.loads(str(output).strip().splitlines()[-1])


def run_probe_here(code: str, timeout_s: float) -> dict[str, Any]:
    """A probe run by this interpreter's Python, and its answer (raises PROBE_FAILED)."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s
    )
    return probe_answer(result.stdout)


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
