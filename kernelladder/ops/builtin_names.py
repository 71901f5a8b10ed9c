"""The built-in ops' names and where each one's OpSpec lives: plain data (no torch), so
the engine can tell a built-in name from a problem path without importing torch."""

from __future__ import annotations

# op name -> (module under kernelladder.ops, attribute holding the OpSpec)
BUILTIN: dict[str, tuple[str, str]] = {
    "softmax": ("softmax", "SOFTMAX"),
    "rmsnorm": ("rmsnorm", "RMSNORM"),
    "attention": ("attention", "ATTENTION"),
    "int8_matmul": ("int8_matmul", "INT8_MATMUL"),
    "kv_quant": ("kv_quant", "KV_QUANT"),
}
BUILTIN_OPS: tuple[str, ...] = tuple(BUILTIN)
