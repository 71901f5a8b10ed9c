"""Which kernel a deploy puts into the model: a run's best that held (or one attempt of
it), or a file with the op named; and, for a workspace, its deploy.py hook.

The kernel is the user's own found kernel: it runs in this process, loaded as the
verifier loads a candidate (verifier/worker/candidate.py), not in the verifier's sandbox.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelladder.deploy.models import DeployError

HOOK_FILE = "deploy.py"  # a workspace's hook: where its kernel goes (docs/DEPLOY.md)
_HOOKS = itertools.count(1)


@dataclass(frozen=True)
class KernelSource:
    op: str  # the op's name ("rmsnorm"; a workspace's directory name)
    op_kind: str  # "builtin" | "workspace" | "kernelbench"
    op_wire: Any  # the verifier's form of the op (ops/registry.op_to_wire)
    source: str
    label: str  # "#12, the run's best that held" / "my_kernel.py"
    attempt: int | None = None
    run_dir: str | None = None
    hook_path: str | None = None  # DIR/deploy.py of a workspace, when there is one

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()


def from_run(run_dir: str, attempt: int | None = None) -> KernelSource:
    """The run's best that held, or attempt `attempt`; DeployError (one line) when the
    run cannot be read or holds no such kernel."""
    from kernelladder.engine import LogError, OpInfo, fold, read_attempt_source, read_log, read_meta

    try:
        read = read_log(run_dir)
        meta = read_meta(run_dir)
        op = OpInfo.from_dict(meta["op"])
    except LogError as exc:
        raise DeployError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise DeployError(
            f"{run_dir}: meta.json has no usable op ({type(exc).__name__}: {exc})"
        ) from None
    if not read.events:
        raise DeployError(f"{run_dir}: the log holds no events")
    state = fold(read.events)
    if attempt is None:
        attempt = state.best_attempt
        if attempt is None:
            raise DeployError(
                f"{run_dir}: no attempt passed, so the run has no best to deploy (--attempt N picks one)"
            )
        held = state.confirmations.get(attempt)
        why = (
            "the run's best that held"
            if held is not None and held["held"]
            else "the run's best" + (" (not re-measured)" if held is None else " (none held)")
        )
    else:
        a = state.attempts.get(attempt)
        if a is None:
            raise DeployError(f"{run_dir}: no attempt #{attempt}")
        why = "passed" if a.passed else ("failed its verdict" if a.verdict else "not judged")
    try:
        source = read_attempt_source(run_dir, attempt)
    except (OSError, UnicodeDecodeError) as exc:
        raise DeployError(f"{run_dir}: cannot read attempts/{attempt}.py: {exc}") from None
    hook = _workspace_hook(meta, run_dir) if op.kind == "workspace" else None
    return KernelSource(
        op=op.name,
        op_kind=op.kind,
        op_wire=op.wire,
        source=source,
        label=f"#{attempt}, {why}",
        attempt=attempt,
        run_dir=str(run_dir),
        hook_path=hook,
    )


def from_file(kernel_file: str, op: str) -> KernelSource:
    """`--kernel FILE --op OP`: OP a built-in op, a workspace directory or a KernelBench
    problem file."""
    from kernelladder.ops.registry import OpLoadError, load_op, op_to_wire, read_text

    source = read_text(kernel_file, "kernel file", DeployError)
    try:
        spec = load_op(op)
    except OpLoadError as exc:
        raise DeployError(str(exc)) from None
    except Exception as exc:  # a problem file that does not execute
        raise DeployError(f"cannot load op {op}: {type(exc).__name__}: {exc}") from None
    hook = None
    if spec.kind == "workspace" and (Path(op) / HOOK_FILE).is_file():
        hook = str(Path(op) / HOOK_FILE)
    return KernelSource(
        op=spec.name,
        op_kind=spec.kind,
        op_wire=op_to_wire(spec),
        source=source,
        label=Path(kernel_file).name,
        hook_path=hook,
    )


def _workspace_hook(meta: dict[str, Any], run_dir: str) -> str | None:
    """DIR/deploy.py of the workspace the run was started on (options.op), looked for as
    given, then beside the run directory."""
    given = str((meta.get("options") or {}).get("op") or "")
    if not given:
        return None
    for base in (Path.cwd(), Path(run_dir).resolve().parent):
        candidate = (
            (base / given / HOOK_FILE) if not Path(given).is_absolute() else Path(given) / HOOK_FILE
        )
        if candidate.is_file():
            return str(candidate)
    return None


@dataclass
class LoadedKernel:
    call: Any  # kernel(*args), or a ModelNew instance
    spec: Any  # the op's OpSpec
    scratch: str  # where the source lives while it runs (Triton's @jit reads it)


def load_kernel(kernel: KernelSource, device: str) -> LoadedKernel:
    """The kernel's entry point, loaded as the verifier loads a candidate. LoadFailure
    (verifier/worker/candidate.py) with one line when it does not load."""
    from kernelladder.ops.registry import op_from_wire
    from kernelladder.verifier.worker import candidate

    spec = op_from_wire(kernel.op_wire)
    scratch = tempfile.mkdtemp(prefix="kernelladder-deploy-")
    loaded = candidate.load(kernel.source, spec, scratch, device, kernel.source_hash)
    return LoadedKernel(loaded.call, spec, scratch)


def load_hook(path: str) -> Any:
    """A workspace's deploy.py as a module: sites(model) and forward(module, kernel, ...)."""
    from kernelladder.deploy.placement import HookError

    name = f"kernelladder_deploy_hook_{next(_HOOKS)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise HookError(f"{path}: cannot be loaded as a module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise HookError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    for needed in ("sites", "forward"):
        if not callable(getattr(module, needed, None)):
            raise HookError(f"{path} defines no {needed}(...) (docs/DEPLOY.md: the hook contract)")
    return module
