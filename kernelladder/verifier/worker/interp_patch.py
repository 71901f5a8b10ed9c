"""Fixes for bf16 in Triton's CPU interpreter, so the CPU worker gives GPU-faithful verdicts.

The interpreter stores bf16 values as raw uint16 bit patterns and then treats them as
integers in several places (FACTS.md): `tl.dot` multiplies the patterns, fp32 -> bf16
casts truncate instead of rounding to nearest even, and elementwise math, reductions
and int <-> bf16 casts run numpy on the patterns. Each patch below routes bf16 through
fp32 (exact for bf16) and rounds back to nearest even, as the GPU does.

One more patch is a cost, not a fix: the interpreter's listing of triton.language's
members, made for every launch and every call of a jit helper, is kept per namespace
(`_patch_member_listing`).

Every patch is applied only when the attribute it replaces exists; `apply()` reports
what was applied and what was skipped (the worker puts that in its hello line).
Import this module only after TRITON_INTERPRET=1 is set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_APPLIED: dict[str, str] = {}


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns (uint16), round to nearest even, NaN kept quiet."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    quiet_nan = ((bits >> 16) | 0x0040).astype(np.uint16)
    return np.where(np.isnan(f32), quiet_nan, rounded).reshape(np.shape(values))


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> fp32, exact."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32).reshape(np.shape(bits))


def apply() -> dict[str, str]:
    """Patch the interpreter once per process; returns {patch: "applied" | "skipped: why"}."""
    if _APPLIED:
        return dict(_APPLIED)
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except Exception as exc:  # triton missing or too different: verdicts say so
        _APPLIED["all"] = f"skipped: cannot import triton's interpreter ({exc!r:.100})"
        return dict(_APPLIED)

    builder = getattr(interp, "InterpreterBuilder", None)
    handle_cls = getattr(interp, "TensorHandle", None)
    if builder is None or handle_cls is None:
        _APPLIED["all"] = "skipped: InterpreterBuilder/TensorHandle not found"
        return dict(_APPLIED)
    bf16, f32 = tl.bfloat16, tl.float32

    def is_bf16(h: Any) -> bool:
        try:
            return h.dtype.scalar == bf16 and h.data.dtype == np.uint16
        except Exception:
            return False

    def as_f32(h: Any) -> Any:
        return handle_cls(bf16_bits_to_f32(h.data), f32)

    def to_bf16(data: np.ndarray) -> Any:
        return handle_cls(f32_to_bf16_bits(data), bf16)

    def patch(name: str, owner: Any, attr: str, make: Any) -> None:
        original = owner.__dict__.get(attr) if hasattr(owner, "__dict__") else None
        if original is None:
            _APPLIED[name] = f"skipped: {getattr(owner, '__name__', owner)}.{attr} not found"
            return
        try:
            setattr(owner, attr, make(original))
            _APPLIED[name] = "applied"
        except Exception as exc:
            _APPLIED[name] = f"skipped: {exc!r:.100}"

    # fp32 <-> bf16 and int <-> bf16 casts: through fp32, round to nearest even.
    def make_cast(original: Any) -> Any:
        def cast_impl(self, src, dst_type):
            dst = dst_type.scalar
            if is_bf16(src):
                src = as_f32(src)
                if dst == f32:
                    return src
            if dst == bf16:
                if src.dtype.scalar != f32:
                    src = original(self, src, f32)
                return to_bf16(src.data)
            return original(self, src, dst_type)

        return cast_impl

    patch("cast-bf16-rtne", builder, "cast_impl", make_cast)
    # The class binds create_fp_trunc/ext etc. as lambdas calling self.cast_impl, so the
    # patch above covers them; create_fp_to_fp goes through _convert_float directly.

    def make_fp_to_fp(original: Any) -> Any:
        def create_fp_to_fp(self, src, dst_type, rounding_mode):
            if is_bf16(src) or dst_type.scalar == bf16:
                return self.cast_impl(src, dst_type)
            return original(self, src, dst_type, rounding_mode)

        return create_fp_to_fp

    patch("fp-to-fp-bf16", builder, "create_fp_to_fp", make_fp_to_fp)

    # tl.dot on bf16 operands: upcast to fp32 (the GPU accumulates bf16 products exactly
    # in fp32, and fp32 products of bf16 values are exact).
    def make_dot(original: Any) -> Any:
        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            if is_bf16(a):
                a = as_f32(a)
            if is_bf16(b):
                b = as_f32(b)
            if is_bf16(d):
                out = original(self, a, b, as_f32(d), input_precision, max_num_imprecise_acc)
                return to_bf16(out.data)
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)

        return create_dot

    patch("dot-bf16-upcast", builder, "create_dot", make_dot)

    bitwise = {np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift}

    # Elementwise binary math on bf16 (add, mul, max, compare...): compute in fp32,
    # round once; bitwise ops keep working on the patterns.
    def make_binary(original: Any) -> Any:
        def binary_op(self, lhs, rhs, op):
            if op not in bitwise and (is_bf16(lhs) or is_bf16(rhs)):
                lhs = as_f32(lhs) if is_bf16(lhs) else lhs
                rhs = as_f32(rhs) if is_bf16(rhs) else rhs
                out = original(self, lhs, rhs, op)
                if out.data.dtype == np.float32:
                    return to_bf16(out.data)
                return out
            return original(self, lhs, rhs, op)

        return binary_op

    patch("binary-bf16", builder, "binary_op", make_binary)

    def make_unary(original: Any) -> Any:
        def unary_op(self, arg, op):
            if is_bf16(arg):
                out = original(self, as_f32(arg), op)
                return to_bf16(out.data) if out.data.dtype == np.float32 else out
            return original(self, arg, op)

        return unary_op

    patch("unary-bf16", builder, "unary_op", make_unary)

    def make_via_f32(n_args: int) -> Any:
        def make(original: Any) -> Any:
            def method(self, *args):
                handles, rest = args[:n_args], args[n_args:]
                if any(is_bf16(h) for h in handles):
                    conv = [as_f32(h) if is_bf16(h) else h for h in handles]
                    out = original(self, *conv, *rest)
                    return to_bf16(out.data) if out.data.dtype == np.float32 else out
                return original(self, *args)

            return method

        return make

    patch("rsqrt-bf16", builder, "create_rsqrt", make_via_f32(1))
    patch("erf-bf16", builder, "create_erf", make_via_f32(1))
    patch("fma-bf16", builder, "create_fma", make_via_f32(3))
    patch("clamp-bf16", builder, "create_clampf", make_via_f32(3))

    # Reductions with numpy fast paths (sum, min, max, argmin, argmax) on bf16.
    reduce_ops = getattr(interp, "ReduceOps", None)
    tensor_cls = getattr(tl.core, "tensor", None)

    def f32_tensor(t: Any) -> Any:
        return tensor_cls(as_f32(t.handle), tl.block_type(f32, list(t.shape)) if t.shape else f32)

    def is_bf16_tensor(t: Any) -> bool:
        return tensor_cls is not None and isinstance(t, tensor_cls) and is_bf16(t.handle)

    def back_to_bf16(result: Any) -> Any:
        h = result.handle
        if h.data.dtype != np.float32:
            return result
        shape = list(result.shape) if result.shape else []
        return tensor_cls(to_bf16(h.data), tl.block_type(bf16, shape) if shape else bf16)

    if reduce_ops is None or tensor_cls is None:
        _APPLIED["reduce-bf16"] = "skipped: ReduceOps not found"
    else:

        def make_sum(original: Any) -> Any:
            def sum_(self, input):
                if is_bf16_tensor(input):
                    return back_to_bf16(original(self, f32_tensor(input)))
                return original(self, input)

            return sum_

        def make_min_max(original: Any) -> Any:
            def min_max(self, input, val_reduce_op, idx_reduce_op=None):
                inp = input[0] if isinstance(input, tuple) else input
                if is_bf16_tensor(inp):
                    out = original(self, f32_tensor(inp), val_reduce_op, idx_reduce_op)
                    if isinstance(out, tuple):
                        return (back_to_bf16(out[0]), *out[1:])
                    return back_to_bf16(out) if val_reduce_op else out
                return original(self, input, val_reduce_op, idx_reduce_op)

            return min_max

        patch("reduce-sum-bf16", reduce_ops, "sum", make_sum)
        patch("reduce-minmax-bf16", reduce_ops, "min_max", make_min_max)

    _patch_member_listing(interp, tl, patch)
    return dict(_APPLIED)


def _patch_member_listing(interp: Any, tl: Any, patch: Any) -> None:
    """Not a fix, a cost: for every launch and every call of a jit helper (tl.sum, ...)
    the interpreter lists the members of triton.language's namespaces with
    inspect.getmembers (dir(), a getattr each, a sort) to wrap their builtins, a sixth of
    a CPU verification. Here the names are listed once per namespace and key set and
    every value is read afresh each time, so what is wrapped is what getmembers gives."""
    is_builtin = getattr(getattr(tl, "core", None), "is_builtin", None)
    if is_builtin is None or not hasattr(interp, "_patch_attr"):
        _APPLIED["member-listing"] = "skipped: is_builtin or _patch_attr not found"
        return
    listed: dict[int, tuple[Any, tuple[Any, ...], list[str]]] = {}

    def make(original: Any) -> Any:
        def _patch_builtin(pkg, builder, scope):
            keys = _keys(pkg)
            seen = listed.get(id(pkg))
            if seen is None or seen[0] is not pkg or seen[1] != keys:
                seen = listed[id(pkg)] = (pkg, keys, dir(pkg))
            for name in seen[2]:
                try:
                    member = getattr(pkg, name)
                except AttributeError:
                    continue
                if is_builtin(member):
                    interp._patch_attr(pkg, name, member, builder, scope)

        return _patch_builtin

    patch("member-listing", interp, "_patch_builtin", make)


def _keys(pkg: Any) -> tuple[Any, ...]:
    """What dir() of a module or a class is made of: its namespace's keys (a class's
    along its MRO)."""
    if isinstance(pkg, type):
        return tuple(tuple(c.__dict__) for c in pkg.__mro__)
    return tuple(vars(pkg))
