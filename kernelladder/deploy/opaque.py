"""A kernel as an opaque operator for torch.compile (torch.library.custom_op): compile
fuses around the kernel's call, never into it, and does not trace the kernel's Python.

Eager runs call the kernel itself: a custom op's dispatch costs tens of microseconds a
call, which a decode step would count against the kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

# op -> (schema, fake): the outputs' shapes and dtypes from the inputs (ops/<op>.py)
_SCHEMAS: dict[str, tuple[str, Callable[..., Any]]] = {
    "rmsnorm": ("(Tensor x, Tensor weight) -> Tensor", lambda x, w: torch.empty_like(x)),
    "attention": ("(Tensor q, Tensor k, Tensor v) -> Tensor", lambda q, k, v: torch.empty_like(q)),
    "kv_quant": (
        "(Tensor x) -> (Tensor, Tensor)",
        lambda x: (
            torch.empty(x.shape, dtype=torch.int8, device=x.device),
            torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device),
        ),
    ),
    "int8_matmul": (
        "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b) -> Tensor",
        lambda a, b, sa, sb: torch.empty(
            (a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device
        ),
    ),
}
_COUNTER = itertools.count(1)
_LIBS: list[Any] = []  # kept alive: a dropped Library unregisters its operators


def opaque_kernel(op: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` registered as kernelladder_deploy::<op>_<n> (a new name per kernel)."""
    schema, fake = _SCHEMAS[op]
    name = f"{op}_{next(_COUNTER)}"
    lib = torch.library.Library("kernelladder_deploy", "FRAGMENT")
    _LIBS.append(lib)
    lib.define(name + schema)

    def impl(*args: Any) -> Any:
        out = kernel(*args)
        return tuple(out) if isinstance(out, list) else out

    for key in ("CPU", "CUDA"):
        lib.impl(name, impl, key)
    torch.library.register_fake(f"kernelladder_deploy::{name}", fake, lib=lib)
    return getattr(torch.ops.kernelladder_deploy, name)
