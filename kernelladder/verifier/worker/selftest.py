"""A worker's warm-up: one tiny Triton launch under the fence recorder, checked; a
Triton kernel wrapped as an operator of the verifier's own (torch.library's custom_op
and triton_op), called under the recorder; on a GPU, torch.compile's first use too.

It runs before the first integrity snapshot and before torch's state is first taken
(torch_state.py), so first-use initialisation (torch's lazy import of torch._dynamo when
a dispatch mode is entered, Triton's driver and launcher set-up, what torch.library
registers the first time an operator is defined) never looks like a candidate's doing,
and it proves on the CPU that the interpreter's bf16 casts and dot now agree with torch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelladder.verifier.worker import fence


@triton.jit
def _bf16_probe(x_ptr, y_ptr, a_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x.to(tl.bfloat16))
    rows = tl.arange(0, 16)
    a = tl.load(a_ptr + rows[:, None] * 16 + rows[None, :])
    tl.store(c_ptr + rows[:, None] * 16 + rows[None, :], tl.dot(a, a))


def run(device: str) -> str:
    """'ok', or what disagreed with torch."""
    n = 256
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(n, generator=gen) * 3).to(device)
    a = torch.randn(16, 16, generator=gen).to(torch.bfloat16).to(device)
    y = torch.empty(n, dtype=torch.bfloat16, device=device)
    c = torch.empty(16, 16, dtype=torch.float32, device=device)
    recorder = fence.FenceRecorder(frozenset(), builtin=True)
    with recorder:
        _bf16_probe[(1,)](x, y, a, c, N=n)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    problems = []
    if not torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16)):
        problems.append("fp32->bf16 cast differs from torch")
    ref = a.float() @ a.float()
    if not torch.allclose(c, ref, rtol=1e-3, atol=1e-3):
        problems.append("bf16 tl.dot differs from torch")
    return "ok" if not problems else "; ".join(problems)


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


WARM_NAMESPACE = "kernelladder_selftest"


def warm_custom_ops(device: str) -> str:
    """A Triton kernel wrapped as operators of the verifier's own namespace
    (torch.library.custom_op and triton_op), defined and called under the fence
    recorder: 'ok' when both launch their kernel and agree with torch, else what did not
    (or why they could not be defined: an older torch)."""
    try:
        from torch.library import custom_op, triton_op, wrap_triton
    except ImportError as exc:
        return f"not available: {exc}"

    def launch(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _double[(1,)](x, y, x.numel(), BLOCK=16)
        return y

    def launch_wrapped(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        wrap_triton(_double)[(1,)](x, y, x.numel(), BLOCK=16)
        return y

    if not hasattr(torch.ops, WARM_NAMESPACE) or not hasattr(
        getattr(torch.ops, WARM_NAMESPACE), "double"
    ):
        custom_op(f"{WARM_NAMESPACE}::double", mutates_args=())(launch)
        triton_op(f"{WARM_NAMESPACE}::double_wrapped", mutates_args={})(launch_wrapped)
    ops = getattr(torch.ops, WARM_NAMESPACE)
    x = torch.arange(10, dtype=torch.float32, device=device)
    known = frozenset(n.split("::")[0] for n in torch._C._dispatch_get_all_op_names())
    recorder = fence.FenceRecorder(frozenset(), builtin=True, known_namespaces=known)
    launches = fence.STATE.launches
    with recorder:
        outs = [ops.double(x), ops.double_wrapped(x)]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    problems = []
    if fence.STATE.launches - launches < 2:
        problems.append("a wrapped kernel did not launch")
    if not all(torch.equal(o, x * 2) for o in outs):
        problems.append("a wrapped kernel's result differs from torch")
    return "ok" if not problems else "; ".join(problems)


def _warm_norm(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def warm_compilers(device: str) -> str:
    """torch.compile's first use in a process costs seconds (its compiler's imports and
    set-up) whatever it compiles. A worker pays them here, as it starts beside the other
    workers, instead of at its first torch.compile baseline, which compiles while the
    GPU is held alone. 'ok', 'not needed' (the CPU has no such baseline), or why not."""
    if not device.startswith("cuda"):
        return "not needed"
    compiled = torch.compile(_warm_norm, dynamic=False)
    x = torch.ones(4, 64, dtype=torch.bfloat16, device=device)
    y = compiled(x)
    torch.cuda.synchronize()
    return "ok" if torch.equal(y, _warm_norm(x)) else "compiled result differs from eager"
