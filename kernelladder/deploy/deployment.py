"""One deploy: the kernel into a model built from a config, checked against the model
without it, and timed on a GPU.

    request = DeployRequest(model="llama-3-8b", layers=4)
    result = run_deploy(from_run("runs/x"), request)    # result.py's dict

A GPU gets the model at full size (4 layers by default), batch 8, a 2048-token prompt,
128 new tokens, bf16, and a timing; the CPU gets the model's tiny config and a short
prompt in Triton's interpreter, and "speed not measured".
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kernelladder.deploy.kernel_source import KernelSource
from kernelladder.deploy.models import DeployError, describe_config, model_choice, sized_config
from kernelladder.deploy.result import ERROR, MATCH, MISMATCH, NOT_USED, RESULT_SCHEMA_VERSION

DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "float32": "float32", "fp32": "float32"}  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    layers: int | None
    batch: int
    prompt: int
    new_tokens: int


# the table on a GPU; seconds in Triton's interpreter on the CPU
GPU_SIZES = Sizes(layers=4, batch=8, prompt=2048, new_tokens=128)
CPU_SIZES = Sizes(layers=None, batch=2, prompt=16, new_tokens=8)  # the tiny config's layers


@dataclass(frozen=True)
class DeployRequest:
    model: str | None = None  # a shipped config's name or a config.json path
    layers: int | None = None
    batch: int | None = None
    prompt: int | None = None
    new_tokens: int | None = None
    dtype: str = "bfloat16"
    device: str | None = None  # None: cuda when there is one
    tiny: bool | None = None  # None: tiny on the CPU, full size on a GPU
    rounds: int | None = None  # timing rounds (GPU)
    seed: int = 0
    keep_model_eps: bool = False  # rmsnorm: keep the model's eps (the kernel has the op's)
    time_it: bool = True  # time on a GPU


def check_request(request: DeployRequest) -> None:
    """DeployError (one line) for sizes no model can take."""
    for field_name in ("layers", "batch", "prompt", "new_tokens", "rounds"):
        value = getattr(request, field_name)
        if value is not None and value < 1:
            flag = "--" + field_name.replace("_", "-")
            raise DeployError(f"{flag} must be at least 1, not {value}")
    if request.dtype not in DTYPES:
        raise DeployError(f"unknown dtype {request.dtype!r} (bfloat16, float16 or float32)")
    if request.device not in (None, "cuda", "cpu"):
        raise DeployError(f"--device must be cuda or cpu, not {request.device!r}")


def run_deploy(
    kernel: KernelSource,
    request: DeployRequest,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The deploy's result (result.py); DeployError for what the user must fix."""
    say = on_progress or (lambda _line: None)
    started = time.time()
    check_request(request)
    choice = model_choice(request.model)  # an unknown model: before anything is loaded
    device = _device(request.device)
    _prepare_triton(device)
    import torch

    from kernelladder.deploy.models import build_model, import_transformers, token_ids

    transformers = import_transformers()
    sizes = GPU_SIZES if device == "cuda" else CPU_SIZES
    tiny = request.tiny if request.tiny is not None else device != "cuda"
    layers = request.layers if request.layers is not None else (sizes.layers if not tiny else None)
    config = sized_config(choice, tiny=tiny, layers=layers)
    described = describe_config(config)
    batch = request.batch or sizes.batch
    prompt = request.prompt or sizes.prompt
    new_tokens = request.new_tokens or sizes.new_tokens
    positions = described.get("max_positions")
    if positions and prompt + new_tokens > positions:
        raise DeployError(
            f"prompt {prompt} + {new_tokens} new tokens exceed {choice.name}'s "
            f"{positions} positions"
        )
    dtype_name = DTYPES[request.dtype]
    dtype = getattr(torch, dtype_name)
    result: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "op": kernel.op,
        "op_kind": kernel.op_kind,
        "kernel": kernel.label,
        "attempt": kernel.attempt,
        "source_hash": kernel.source_hash,
        "run_dir": kernel.run_dir,
        "model": {
            "name": choice.name,
            "about": choice.about,
            "config": choice.path,
            "tiny": tiny,
            "dtype": dtype_name,
            **described,
        },
        "workload": {
            "batch": batch,
            "prompt": prompt,
            "new_tokens": new_tokens,
            "seed": request.seed,
        },
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "interpreter": device == "cpu",
        "versions": _versions(torch, transformers),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "placement": None,
        "check": None,
        "speed": None,
        "speed_note": "",
    }
    from kernelladder.deploy.kernel_source import load_hook, load_kernel
    from kernelladder.deploy.placement import HookError, place, unpatched_twin
    from kernelladder.verifier.worker.candidate import LoadFailure

    say(f"loading the kernel ({kernel.label})")
    loaded = None
    try:
        try:
            loaded = load_kernel(kernel, device)
        except LoadFailure as exc:
            return _finish(result, ERROR, started, error=f"the kernel did not load: {exc.detail}")
        hook = None
        if kernel.hook_path:
            try:
                hook = load_hook(kernel.hook_path)
            except HookError as exc:
                raise DeployError(str(exc)) from None
        say(
            f"building {choice.name}{' (tiny)' if tiny else ''} with random weights, {dtype_name}, on {device}"
        )
        model = build_model(config, dtype=dtype, device=device, seed=request.seed)
        result["model"]["parameters"] = sum(p.numel() for p in model.parameters())
        from kernelladder.deploy.calls import KernelCalls, KernelFailed

        calls = KernelCalls()
        weights = dict(model.state_dict())  # as built: the float32 twin loads them
        try:
            placement = place(
                kernel.op if kernel.op_kind == "builtin" else kernel.op_kind,
                loaded.call, model, calls, hook=hook, align_eps=not request.keep_model_eps,
            )  # fmt: skip
        except HookError as exc:
            raise DeployError(str(exc)) from None
        if kernel.op_kind == "workspace" and hook is None:
            placement = replace(
                placement,
                where="not used by this model: a workspace kernel says where it goes in its "
                "DIR/deploy.py (none found; docs/DEPLOY.md)",
            )
        result["placement"] = placement.to_dict()
        if not placement.used:
            result["speed_note"] = "not measured: the kernel has no place in this model"
            return _finish(result, NOT_USED, started)
        ids = token_ids(batch, prompt, int(config["vocab_size"]), request.seed, device)
        from kernelladder.deploy.check import run_check

        op_name = kernel.op if kernel.op_kind == "builtin" else kernel.op_kind

        def float32_twin() -> tuple[Any, Any]:
            say("checking: the unpatched model in float32, for its own rounding error")
            twin = build_model(config, dtype=torch.float32, device=device, seed=request.seed)
            twin.load_state_dict(weights)
            make = unpatched_twin(
                op_name, loaded.call, twin, hook=hook, align_eps=not request.keep_model_eps
            )
            return twin, make

        say("checking: the unpatched model, then the patched one on the same prompt")
        check = run_check(
            model, ids, new_tokens, calls, make_cache=placement.make_cache, dtype=dtype,
            float32_twin=float32_twin,
        )  # fmt: skip
        weights.clear()  # the snapshot of the weights is not needed any more
        result["check"] = check
        if check["status"] == "not-run":  # every call fell back: the kernel never ran
            why = "; ".join(f"{f['why']} ({f['calls']} calls)" for f in check["calls"]["fallbacks"])
            result["placement"]["where"] = (
                f"not used by this model: the kernel never ran, every call took the model's "
                f"own code ({why or 'no call came'})"
            )
            result["speed_note"] = "not measured: the kernel never ran in this model"
            return _finish(result, NOT_USED, started)
        status = MATCH if check["status"] == MATCH else MISMATCH
        if device != "cuda":
            result["speed_note"] = (
                "not measured: no GPU (the check ran in Triton's interpreter on the CPU)"
            )
        elif status != MATCH:
            result["speed_note"] = "not measured: the patched model does not match"
        elif not request.time_it:
            result["speed_note"] = "not measured: --no-time"
        else:
            from kernelladder.deploy.speed import DEFAULT_ROUNDS, time_variants

            result["run_live"] = _run_live(kernel.run_dir)

            try:
                result["speed"] = time_variants(
                    model, ids, new_tokens, calls, make_cache=placement.make_cache,
                    rounds=request.rounds or DEFAULT_ROUNDS, on_progress=say,
                )  # fmt: skip
            except KernelFailed:
                failure = calls.failure.saw if calls.failure is not None else "the kernel raised"
                result["speed_note"] = f"not measured: while timed, {failure}"
                return _finish(result, MISMATCH, started)
        return _finish(result, status, started)
    finally:
        if loaded is not None:
            shutil.rmtree(loaded.scratch, ignore_errors=True)


def _finish(result: dict[str, Any], status: str, started: float, error: str = "") -> dict[str, Any]:
    from kernelladder.deploy.result import summary_line

    result["status"] = status
    if error:
        result["error"] = error
    if status == ERROR and not result.get("speed_note"):
        result["speed_note"] = "not measured: the kernel did not load"
    result["elapsed_s"] = round(time.time() - started, 3)
    result["summary"] = summary_line(result)
    return result


def _run_live(run_dir: str | None) -> bool:
    """Whether the kernel's run is live now: its verifications may share the GPU."""
    if not run_dir:
        return False
    from kernelladder.engine import writer_active

    return writer_active(run_dir)


def _device(asked: str | None) -> str:
    import torch

    if asked == "cuda" and not torch.cuda.is_available():
        raise DeployError("--device cuda: no CUDA GPU is available here (use --device cpu)")
    return asked or ("cuda" if torch.cuda.is_available() else "cpu")


def _prepare_triton(device: str) -> None:
    """On the CPU the kernel runs in Triton's interpreter (chosen before triton is
    imported), with the verifier's bf16 fixes to the interpreter (interp_patch.py)."""
    if device != "cpu":
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        if "triton" in sys.modules:
            raise DeployError(
                "no GPU here and triton was imported without TRITON_INTERPRET=1; set "
                "TRITON_INTERPRET=1 to run the kernel on the CPU"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    from kernelladder.verifier.worker import interp_patch

    interp_patch.apply()


def _versions(torch: Any, transformers: Any) -> dict[str, str]:
    try:
        import triton

        triton_version = str(triton.__version__)
    except Exception:
        triton_version = "?"
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": triton_version,
        "transformers": str(transformers.__version__),
        "cuda": str(torch.version.cuda or ""),
    }
