"""The switches that choose what a kernel runs (SDPA's backends, cuDNN's, TF32 and
float32 matmul precision, reduced-precision reductions, deterministic algorithms, BLAS
and linear-algebra backends, threads, the default dtype, grad and autocast modes...),
each read through torch._C's own getter, bound at import before any candidate (a Python
property in front of it could lie)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

_C = torch._C
_GETATTR = getattr
_TYPE = type
_CUDA_UP = torch.cuda.is_initialized

# (what a person would type to read it, getter name, arguments)
# fmt: off
GETTERS: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("torch.backends.cuda.flash_sdp_enabled()", "_get_flash_sdp_enabled", ()),
    ("torch.backends.cuda.mem_efficient_sdp_enabled()", "_get_mem_efficient_sdp_enabled", ()),
    ("torch.backends.cuda.math_sdp_enabled()", "_get_math_sdp_enabled", ()),
    ("torch.backends.cuda.cudnn_sdp_enabled()", "_get_cudnn_sdp_enabled", ()),
    ("torch.backends.cuda.fa3_sdp_enabled()", "_get_fa3_sdp_enabled", ()),
    ("torch.backends.cuda.overrideable_sdp_enabled()", "_get_overrideable_sdp_enabled", ()),
    ("torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp()", "_get_math_sdp_allow_fp16_bf16_reduction", ()),
    ("the SDPA backends' priority order", "_get_sdp_priority_order", ()),
    ("torch.backends.cuda.matmul.allow_tf32", "_get_cublas_allow_tf32", ()),
    ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", "_get_cublas_allow_fp16_reduced_precision_reduction", ()),
    ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "_get_cublas_allow_bf16_reduced_precision_reduction", ()),
    ("torch.backends.cuda.matmul.allow_fp16_accumulation", "_get_cublas_allow_fp16_accumulation", ()),
    ("torch.backends.cpu reduced-precision fp16 reduction", "_get_cpu_allow_fp16_reduced_precision_reduction", ()),
    ("torch.get_float32_matmul_precision()", "_get_float32_matmul_precision", ()),
    ("torch.backends.fp32_precision", "_get_fp32_precision_getter", ("generic", "all")),
    ("torch.backends.cuda.matmul.fp32_precision", "_get_fp32_precision_getter", ("cuda", "matmul")),
    ("torch.backends.cudnn.conv.fp32_precision", "_get_fp32_precision_getter", ("cuda", "conv")),
    ("torch.backends.cudnn.rnn.fp32_precision", "_get_fp32_precision_getter", ("cuda", "rnn")),
    ("torch.backends.mkldnn.matmul.fp32_precision", "_get_fp32_precision_getter", ("mkldnn", "matmul")),
    ("torch.backends.mkldnn.conv.fp32_precision", "_get_fp32_precision_getter", ("mkldnn", "conv")),
    ("torch.backends.cudnn.enabled", "_get_cudnn_enabled", ()),
    ("torch.backends.cudnn.benchmark", "_get_cudnn_benchmark", ()),
    ("torch.backends.cudnn.deterministic", "_get_cudnn_deterministic", ()),
    ("torch.backends.cudnn.allow_tf32", "_get_cudnn_allow_tf32", ()),
    ("torch.backends.mkldnn.enabled", "_get_mkldnn_enabled", ()),
    ("torch.backends.mkldnn.deterministic", "_get_mkldnn_deterministic", ()),
    ("torch.backends.mkldnn.allow_tf32", "_get_onednn_allow_tf32", ()),
    ("torch.backends.nnpack.enabled", "_get_nnpack_enabled", ()),
    ("torch.backends.xnnpack.enabled", "_is_xnnpack_enabled", ()),
    ("torch.are_deterministic_algorithms_enabled()", "_get_deterministic_algorithms", ()),
    ("torch.is_deterministic_algorithms_warn_only_enabled()", "_get_deterministic_algorithms_warn_only", ()),
    ("torch.utils.deterministic.fill_uninitialized_memory", "_get_deterministic_fill_uninitialized_memory", ()),
    ("torch.backends.cuda.preferred_blas_library()", "_get_blas_preferred_backend", ()),
    ("torch.backends.cuda.preferred_linalg_library()", "_get_linalg_preferred_backend", ()),
    ("torch.backends.cuda.preferred_rocm_fa_library()", "_get_rocm_fa_preferred_backend", ()),
    ("torch._C._set_sm_carveout_experimental", "_get_sm_carveout_experimental", ()),
    ("torch.backends.quantized.engine", "_get_qengine", ()),
    ("torch.get_num_threads()", "get_num_threads", ()),
    ("torch.get_default_dtype()", "get_default_dtype", ()),
    ("torch.get_default_device()", "_get_default_device", ()),
    ("torch.is_grad_enabled()", "is_grad_enabled", ()),
    ("torch.is_inference_mode_enabled()", "is_inference_mode_enabled", ()),
    ("forward-mode AD", "_is_fwd_grad_enabled", ()),
    ("autocast (any device)", "_is_any_autocast_enabled", ()),
    ("torch.is_anomaly_enabled()", "is_anomaly_enabled", ()),
    ("the autograd fallback mode", "_get_autograd_fallback_mode", ()),
    ("__torch_function__ (torch._C._get_torch_function_state)", "_get_torch_function_state", ()),
    ("__torch_function__ (torch._C._is_torch_function_enabled)", "_is_torch_function_enabled", ()),
    ("__torch_function__ modes (torch._C._is_torch_function_mode_enabled)", "_is_torch_function_mode_enabled", ()),
    ("torch.cuda.get_sync_debug_mode()", "_cuda_get_sync_debug_mode", ()),
    ("the current CUDA device", "_cuda_getDevice", ()),
)
# fmt: on


def _bind_switches() -> tuple[tuple[str, Any, tuple[Any, ...], bool], ...]:
    """(label, getter, arguments, whether it asks CUDA) for the getters this build has,
    bound at import, before any candidate; a CUDA getter is asked only once CUDA is up
    (asking would start it in a CPU worker)."""
    bound = []
    for label, name, args in GETTERS:
        getter = _GETATTR(_C, name, None)
        if getter is None:
            continue
        asks_cuda = name.startswith("_cuda")
        if not asks_cuda:
            try:
                getter(*args)
            except Exception:
                continue
        bound.append((label, getter, args, asks_cuda))
    return tuple(bound)


SWITCHES = _bind_switches()


def read_switches(labels: Iterable[str] | None = None) -> dict[str, Any]:
    """Each switch's value (`labels`: those a snapshot read; else every one that answers
    in this process now)."""
    wanted = set(labels) if labels is not None else None
    values: dict[str, Any] = {}
    for label, getter, args, asks_cuda in SWITCHES:
        if wanted is not None and label not in wanted:
            continue
        if wanted is None and asks_cuda:
            if not _CUDA_UP():
                continue
            try:
                getter(*args)
            except Exception:
                continue
        try:
            values[label] = getter(*args)
        except Exception as exc:  # a getter that stops answering is a change too
            values[label] = f"<unreadable: {_TYPE(exc).__name__}>"
    return values
