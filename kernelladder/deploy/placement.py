"""Where a kernel goes in a transformers decoder, op by op.

    placement = place(op_name, kernel, model, calls, hook=None)
    placement.used      # False: the line says why the model has no place for it
    placement.where     # one line: where it runs
    placement.notes     # what a reader must know (what falls back, what was aligned)

- rmsnorm: the forward of every RMSNorm module (x flattened to [rows, N]).
- attention: transformers' attention registry (AttentionInterface) under the name
  "kernelladder": causal prefill runs the kernel (K/V heads repeated for GQA); a decode
  step (one query over the cache), a mask, a sliding window or another scale runs SDPA,
  counted and said.
- kv_quant: the KV cache, stored as int8 codes with a scale per row (make_cache); both
  runs use it, the unpatched one quantizing with the op's torch reference.
- int8_matmul: the decoder layers' nn.Linear modules as W8A8 (weights per output row,
  activations per row, both symmetric int8); the unpatched run multiplies with the op's
  torch reference.
- a workspace kernel: where its DIR/deploy.py says (docs/DEPLOY.md, the hook contract).
- anything else (softmax, KernelBench problems): "not used by this model".

The placement is installed once; KernelCalls.active switches between the kernel and the
model's own code, so patched and unpatched runs share the same weights.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelladder.deploy.calls import CallFailure, KernelCalls, compare_tensors
from kernelladder.deploy.opaque import opaque_kernel

ATTENTION_NAME = "kernelladder"
OP_EPS = {"rmsnorm": 1e-6}  # ops/rmsnorm/spec.py: the op's contract fixes eps


@dataclass
class Placement:
    op: str
    used: bool
    where: str
    notes: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # the modules the kernel may run in
    # a new KV cache for one generation (kv_quant's int8 cache); None: the model's own
    make_cache: Callable[[], Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "used": self.used,
            "where": self.where,
            "notes": list(self.notes),
            "sites": len(self.sites),
            "site_names": _abbreviate(self.sites),
        }


def not_used(op: str, why: str) -> Placement:
    return Placement(op, False, f"not used by this model: {why}")


def place(
    op: str,
    kernel: Callable[..., Any],
    model: Any,
    calls: KernelCalls,
    *,
    hook: Any = None,
    align_eps: bool = True,
) -> Placement:
    """Install `kernel` where `model` uses op `op` (see the module docstring)."""
    if hook is not None:
        return _place_with_hook(op, kernel, model, calls, hook)
    if op == "rmsnorm":
        return _place_rmsnorm(kernel, model, calls, align_eps)
    if op == "attention":
        return _place_attention(kernel, model, calls)
    if op == "kv_quant":
        return _place_kv_quant(kernel, model, calls)
    if op == "int8_matmul":
        return _place_int8_matmul(kernel, model, calls)
    if op == "softmax":
        return not_used(
            op, "its attention's softmax runs inside one fused attention call (SDPA, or an "
            "attention kernel), not as a separate op",
        )  # fmt: skip
    return not_used(
        op, "this op is not one a decoder model has a place for (a workspace kernel says "
        "where it goes in DIR/deploy.py: docs/DEPLOY.md)",
    )  # fmt: skip


def unpatched_twin(
    op: str, kernel: Callable[..., Any], model: Any, *, hook: Any = None, align_eps: bool = True
) -> Callable[[], Any] | None:
    """Make another copy of the model (the check's float32 run) compute what the unpatched
    model computes: the same eps, the same int8 cache or W8A8 linears, never the kernel.
    Returns its cache maker (None: the model's own). Attention and a hook's modules need
    nothing: unpatched, they are the model's own code."""
    if hook is not None or op not in ("rmsnorm", "kv_quant", "int8_matmul"):
        return None
    return place(op, kernel, model, KernelCalls(), align_eps=align_eps).make_cache


# --- rmsnorm ------------------------------------------------------------------------------


def _rms_eps(module: Any) -> float | None:
    for attr in ("variance_epsilon", "eps"):
        value = getattr(module, attr, None)
        if isinstance(value, float | int):
            return float(value)
    return None


def _place_rmsnorm(kernel: Any, model: Any, calls: KernelCalls, align_eps: bool) -> Placement:
    from kernelladder.ops import _common

    norms = [
        (name, m)
        for name, m in model.named_modules()
        if "RMSNorm" in type(m).__name__
        and isinstance(getattr(m, "weight", None), torch.nn.Parameter)
        and m.weight.dim() == 1
    ]
    if not norms:
        kinds = sorted(
            {type(m).__name__ for _, m in model.named_modules() if "Norm" in type(m).__name__}
        )
        why = (
            f"no RMSNorm module (it normalizes with {', '.join(kinds)})"
            if kinds
            else "no RMSNorm module"
        )
        return not_used("rmsnorm", why)
    notes: list[str] = []
    eps = OP_EPS["rmsnorm"]
    model_eps = sorted({e for e in (_rms_eps(m) for _, m in norms) if e is not None})
    if model_eps and model_eps != [eps]:
        shown = ", ".join(f"{e:g}" for e in model_eps)
        if align_eps:
            for _, m in norms:
                _set_eps(m, eps)
            notes.append(
                f"eps: the model's RMSNorm uses {shown}, the op (so the kernel) {eps:g}; "
                f"both runs use {eps:g} (--keep-model-eps checks the kernel against {shown})"
            )
        else:
            notes.append(
                f"eps: the model's RMSNorm uses {shown}, the op (so the kernel) {eps:g}: "
                "the check compares the kernel with the model's eps"
            )
    opaque = opaque_kernel("rmsnorm", kernel)
    kinds = sorted({type(m).__name__ for _, m in norms})
    for name, module in norms:
        original = module.forward

        def forward(x: torch.Tensor, *, _name=name, _m=module, _orig=original) -> torch.Tensor:
            if not calls.active:
                return _orig(x)
            if x.dim() < 1 or x.shape[-1] != _m.weight.shape[0]:
                calls.fallback("an input whose last dim is not the weight's")
                return _orig(x)
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            weight = _m.weight if _m.weight.dtype == x.dtype else _m.weight.to(x.dtype)
            compare = None
            if calls.checking:  # built only to check (never under torch.compile)
                tol = _common.ELEMENTWISE_TOL.get(x.dtype, _common.ELEMENTWISE_TOL[torch.float32])
                compare = compare_tensors(tol, f"the model's {type(_m).__name__}")
            return calls.run(
                _name,
                kernel=lambda: kernel(rows, weight).view(x.shape),
                compiled=lambda: opaque(rows, weight).view(x.shape),
                model=lambda: _orig(x),
                compare=compare,
            )

        module.forward = forward
    where = f"the forward of {len(norms)} {'/'.join(kinds)} modules ({_abbreviate([n for n, _ in norms])})"
    return Placement("rmsnorm", True, where, notes, [n for n, _ in norms])


def _set_eps(module: Any, eps: float) -> None:
    for attr in ("variance_epsilon", "eps"):
        if isinstance(getattr(module, attr, None), float | int):
            setattr(module, attr, eps)
            return


# --- attention ------------------------------------------------------------------------------


def _attention_modules(model: Any) -> list[tuple[str, Any]]:
    found = []
    for name, m in model.named_modules():
        if hasattr(m, "layer_idx") and any(
            hasattr(m, p) for p in ("q_proj", "c_attn", "qkv_proj", "query_key_value")
        ):
            found.append((name, m))
    return found


def _place_attention(kernel: Any, model: Any, calls: KernelCalls) -> Placement:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from kernelladder.ops.attention.spec import ATTENTION_TOL

    can_set = getattr(model, "_can_set_attn_implementation", None)
    if callable(can_set) and not can_set():
        return not_used(
            "attention",
            "its attention does not go through transformers' attention registry "
            "(AttentionInterface)",
        )
    modules = _attention_modules(model)
    names = {id(m): n for n, m in modules}
    opaque = opaque_kernel("attention", kernel)

    def attention(
        module: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        dropout: float = 0.0,
        scaling: float | None = None,
        is_causal: bool | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        def model_own() -> Any:
            return sdpa_attention_forward(
                module, query, key, value, attention_mask,
                dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs,
            )[0]  # fmt: skip

        if not calls.active:
            return model_own(), None
        why = _attention_unsupported(
            module, query, key, attention_mask, dropout, scaling, is_causal, kwargs
        )
        if why:
            calls.fallback(why)
            return model_own(), None
        groups = query.shape[1] // key.shape[1]
        q = query.contiguous()
        k = repeat_kv(key, groups).contiguous()
        v = repeat_kv(value, groups).contiguous()
        compare = None
        if calls.checking:  # built only to check (never under torch.compile)
            compare = compare_tensors(ATTENTION_TOL[query.dtype], "SDPA in the model")
        out = calls.run(
            names.get(id(module), f"layer {getattr(module, 'layer_idx', '?')} attention"),
            kernel=lambda: kernel(q, k, v).transpose(1, 2).contiguous(),
            compiled=lambda: opaque(q, k, v).transpose(1, 2).contiguous(),
            model=model_own,
            compare=compare,
        )
        return out, None

    AttentionInterface.register(ATTENTION_NAME, attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    try:
        model.set_attn_implementation(ATTENTION_NAME)
    except (ValueError, KeyError, ImportError) as exc:
        return not_used("attention", f"transformers refused the attention implementation: {exc}")
    if getattr(model.config, "_attn_implementation", None) != ATTENTION_NAME:
        return not_used("attention", "transformers kept its own attention implementation")
    notes = [
        "decode steps run SDPA: the op's contract is causal attention over one sequence "
        "(q, k, v of one length), a decode step is one query over the KV cache",
    ]
    kv = getattr(model.config, "num_key_value_heads", None)
    heads = getattr(model.config, "num_attention_heads", None)
    if kv and heads and kv != heads:
        notes.append(f"GQA: the {kv} K/V heads are repeated to {heads} before the kernel (a copy)")
    where = f"transformers' attention registry, causal prefill of {len(modules)} attention modules"
    return Placement("attention", True, where, notes, [n for n, _ in modules])


def _attention_unsupported(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    mask: Any,
    dropout: float,
    scaling: float | None,
    is_causal: bool | None,
    kwargs: dict[str, Any],
) -> str:
    """Why the kernel cannot take this call ('' when it can)."""
    if query.shape[2] != key.shape[2]:
        return "decode: one query over the cache"
    if mask is not None:
        return "a mask (padding or a custom mask)"
    if query.dtype not in (torch.bfloat16, torch.float16):
        return f"{str(query.dtype).removeprefix('torch.')} (the op takes bf16/fp16)"
    if dropout:
        return "dropout"
    if is_causal is False or getattr(module, "is_causal", True) is False:
        return "not causal"
    if kwargs.get("sliding_window") or kwargs.get("softcap"):
        return "a sliding window or a softcap"
    d = query.shape[-1]
    if scaling is not None and abs(scaling - d**-0.5) > 1e-6 * d**-0.5:
        return f"a scale of {scaling:.4g}, not 1/sqrt({d})"
    if query.shape[1] % key.shape[1]:
        return "query heads not a multiple of the K/V heads"
    return ""


# --- kv_quant -------------------------------------------------------------------------------


def _place_kv_quant(kernel: Any, model: Any, calls: KernelCalls) -> Placement:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    from kernelladder.ops.kv_quant.spec import KV_QUANT
    from kernelladder.ops.spec import Shape

    opaque = opaque_kernel("kv_quant", kernel)

    def quantize(x3: torch.Tensor, site: str) -> tuple[torch.Tensor, torch.Tensor]:
        def compare(out: Any, _expected: Any) -> tuple[float, CallFailure | None]:
            inputs = {"x": x3}
            shape = Shape("model", dict(zip("THD", x3.shape, strict=True)), "bfloat16")
            m = KV_QUANT.compare(out, KV_QUANT.reference_hp(inputs), inputs, shape)
            if m is None:
                return 0.0, None
            from kernelladder.deploy.calls import failure_from_mismatch

            return m.error / max(m.allowed, 1e-300), failure_from_mismatch(m, "the op's reference")

        return calls.run(
            site,
            kernel=lambda: tuple(kernel(x3)),
            compiled=lambda: tuple(opaque(x3)),
            model=lambda: KV_QUANT.reference({"x": x3}),
            compare=compare,
        )

    class Int8KVLayer(DynamicLayer):
        """K and V kept as int8 codes with an fp32 scale per (batch, head, position),
        quantized from bf16 as they arrive; attention reads them dequantized."""

        def __init__(self, index: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.index = index
            self._codes: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
                "keys": [],
                "values": [],
            }

        def _append(self, which: str, states: torch.Tensor) -> torch.Tensor:
            b, h, s, d = states.shape
            x3 = states.to(torch.bfloat16).reshape(b * h, s, d).contiguous()
            site = f"KV cache, layer {self.index} {which}"
            q, scale = quantize(x3, site)
            self._codes[which].append((q.reshape(b, h, s, d), scale.reshape(b, h, s)))
            codes = torch.cat([c for c, _ in self._codes[which]], dim=-2)
            scales = torch.cat([sc for _, sc in self._codes[which]], dim=-1)
            return (codes.float() * scales[..., None]).to(states.dtype)

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys = self._append("keys", key_states)
            self.values = self._append("values", value_states)
            return self.keys, self.values

    def make_cache() -> Any:
        cache = DynamicCache(config=model.config)
        if not cache.layers:
            layers = getattr(model.config.get_text_config(decoder=True), "num_hidden_layers", 0)
            cache.layers = [DynamicLayer() for _ in range(layers)]
        cache.layers = [
            Int8KVLayer(i) if type(layer) is DynamicLayer else layer
            for i, layer in enumerate(cache.layers)
        ]
        return cache

    probe = DynamicCache(config=model.config)
    full = [i for i, layer in enumerate(probe.layers) if type(layer) is DynamicLayer]
    if probe.layers and not full:
        return not_used("kv_quant", "its KV cache has no full-attention layer to store as int8")
    count = len(full) if probe.layers else getattr(model.config, "num_hidden_layers", 0)
    return Placement(
        "kv_quant",
        True,
        f"the KV cache of {count} layers, stored as int8 codes with a scale per row "
        "(keys and values quantized as they arrive)",
        [
            "both runs use the int8 KV cache: the unpatched run quantizes with the op's torch "
            "reference, so the comparison is the kernel against that reference in the model",
            "K/V are cast to bf16 before quantizing (the op takes bf16)",
        ],
        [f"KV cache, layer {i} {w}" for i in range(count) for w in ("keys", "values")],
        make_cache=make_cache,
    )


# --- int8_matmul ----------------------------------------------------------------------------


def _place_int8_matmul(kernel: Any, model: Any, calls: KernelCalls) -> Placement:
    from kernelladder.ops.int8_matmul.spec import INT8_MATMUL
    from kernelladder.ops.kv_quant.spec import QMAX
    from kernelladder.ops.spec import Shape

    layers = _decoder_layers(model)
    linears = [
        (f"{prefix}.{name}", parent, attr, lin)
        for prefix, layer in layers
        for name, parent, attr, lin in _linears(layer)
    ]
    if not linears:
        kinds = sorted(
            {
                type(m).__name__
                for _, layer in layers
                for m in layer.modules()
                if "Conv1D" in type(m).__name__
            }
        )
        why = "its decoder layers have no nn.Linear projections" + (
            f" ({', '.join(kinds)} instead)" if kinds else ""
        )
        return not_used("int8_matmul", why)
    opaque = opaque_kernel("int8_matmul", kernel)

    def quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        absmax = t.float().abs().amax(dim=-1)
        scale = torch.where(absmax == 0, torch.ones_like(absmax), absmax / QMAX)
        codes = torch.round(t.float() / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
        return codes.contiguous(), scale.contiguous()

    class W8A8Linear(torch.nn.Module):
        """nn.Linear with int8 weights (a scale per output row) and int8 activations
        (a scale per row, computed per call): out = (a @ b.T) * sa * sb, bf16, + bias."""

        def __init__(self, site: str, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.site = site
            codes, scale = quantize_rows(linear.weight.detach())
            self.register_buffer("weight_codes", codes)
            self.register_buffer("weight_scale", scale)
            self.bias = linear.bias
            self.in_features, self.out_features = linear.in_features, linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows = x.reshape(-1, x.shape[-1])
            a, sa = quantize_rows(rows)
            b, sb = self.weight_codes, self.weight_scale
            inputs = {"a": a, "b": b, "scale_a": sa, "scale_b": sb}

            def compare(out: Any, _expected: Any) -> tuple[float, CallFailure | None]:
                m, k = a.shape
                shape = Shape("model", {"M": m, "N": b.shape[0], "K": k}, "int8")
                found = INT8_MATMUL.compare((out,), INT8_MATMUL.reference_hp(inputs), inputs, shape)
                if found is None:
                    return 0.0, None
                from kernelladder.deploy.calls import failure_from_mismatch

                return found.error / max(found.allowed, 1e-300), failure_from_mismatch(
                    found, "the op's exact reference"
                )

            out = calls.run(
                self.site,
                kernel=lambda: kernel(a, b, sa, sb),
                compiled=lambda: opaque(a, b, sa, sb),
                model=lambda: INT8_MATMUL.reference(inputs)[0],
                compare=compare,
            )
            out = out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
            return out + self.bias if self.bias is not None else out

    for site, parent, attr, lin in linears:
        setattr(parent, attr, W8A8Linear(site, lin))
    return Placement(
        "int8_matmul",
        True,
        f"{len(linears)} nn.Linear projections of the {len(layers)} decoder layers as W8A8 "
        f"({_abbreviate([s for s, *_ in linears])})",
        [
            "both runs use the W8A8 linears (int8 weights per output row, int8 activations "
            "per row): the unpatched run multiplies with the op's torch reference",
            "the embedding and the LM head stay in the model's dtype",
        ],
        [s for s, *_ in linears],
    )


def _decoder_layers(model: Any) -> list[tuple[str, Any]]:
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) and name.endswith(("layers", ".h")):
            return [(f"{name}.{i}", layer) for i, layer in enumerate(m)]
    return []


def _linears(layer: Any) -> list[tuple[str, Any, str, torch.nn.Linear]]:
    found = []
    for name, m in layer.named_modules():
        for attr, child in m.named_children():
            if type(child) is torch.nn.Linear:
                full = f"{name}.{attr}" if name else attr
                found.append((full, m, attr, child))
    return found


# --- a workspace's hook ---------------------------------------------------------------------


def _place_with_hook(op: str, kernel: Any, model: Any, calls: KernelCalls, hook: Any) -> Placement:
    """DIR/deploy.py: sites(model) -> [(name, module)], and forward(module, kernel, *args,
    **kwargs) -> what the module's forward returns (docs/DEPLOY.md)."""
    from kernelladder.ops.workspace import WORKSPACE_TOL

    try:
        found = list(hook.sites(model))
    except Exception as exc:
        raise HookError(f"deploy.py: sites(model) raised {type(exc).__name__}: {exc}") from None
    if not found:
        why = str(getattr(hook, "NOT_USED", "") or "deploy.py's sites(model) found no module")
        return not_used(op, why)
    for entry in found:
        if not (
            isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], torch.nn.Module)
        ):
            raise HookError("deploy.py: sites(model) must give (name, module) pairs")
    for name, module in found:
        original = module.forward
        compiled = torch.compiler.disable(functools.partial(hook.forward, module, kernel))

        def forward(
            *args: Any,
            _name=str(name),
            _m=module,
            _orig=original,
            _compiled=compiled,
            **kwargs: Any,
        ) -> Any:
            if not calls.active:
                return _orig(*args, **kwargs)
            compare = None
            if calls.checking:  # built only to check (never under torch.compile)
                tensors = itertools.chain(args, kwargs.values())
                first = next((a for a in tensors if isinstance(a, torch.Tensor)), None)
                floating = first is not None and first.is_floating_point()
                dtype = first.dtype if floating else torch.float32
                tol = WORKSPACE_TOL.get(dtype, WORKSPACE_TOL[torch.float32])
                compare = compare_tensors(tol, f"the model's {type(_m).__name__}")
            return calls.run(
                _name,
                kernel=lambda: hook.forward(_m, kernel, *args, **kwargs),
                compiled=lambda: _compiled(*args, **kwargs),
                model=lambda: _orig(*args, **kwargs),
                compare=compare,
            )

        module.forward = forward
    names = [str(n) for n, _ in found]
    about = str(getattr(hook, "WHERE", "") or "the modules deploy.py's sites(model) names")
    return Placement(op, True, f"{about} ({len(names)}: {_abbreviate(names)})", [], names)


class HookError(Exception):
    """A workspace's deploy.py that does not keep the contract (one line)."""


# --- helpers --------------------------------------------------------------------------------


def _abbreviate(names: list[str], limit: int = 3) -> str:
    """'model.layers.0.input_layernorm, model.layers.0.post_attention_layernorm, ... (9)'."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)})"


@contextlib.contextmanager
def state(calls: KernelCalls, *, active: bool, checking: bool = False):
    """Patched (active) or unpatched, checking or not, for a block."""
    before = (calls.active, calls.checking)
    calls.active, calls.checking = active, checking
    try:
        yield calls
    finally:
        calls.active, calls.checking = before
