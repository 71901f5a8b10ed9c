"""Pieces every gate uses: the signals that end a candidate's trials, bitwise tensor
comparison, shape indices and lists in text, the worker's child processes. Torch and stdlib only."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelladder.verifier.worker.integrity import TRUSTED


class _Stop(Exception):
    """Ends the trials early; the gate results so far say why."""


class _Broken(Exception):
    """The CUDA context is unusable (illegal memory access...): a crash verdict."""


def ops_text(calls: Mapping[str, int]) -> str:
    """The torch ops a candidate called, with their counts."""
    if not calls:
        return "none"
    return ", ".join(f"{k}x{v}" for k, v in sorted(calls.items())[:8])


def device_healthy() -> bool:
    """Whether the GPU's work so far finishes without a device fault."""
    try:
        TRUSTED.cuda_synchronize()
        return True
    except Exception:
        return False


def listed(items: Sequence[str], shown: int = 3, sep: str = "; ") -> str:
    """The first `shown` items joined, and how many more there are."""
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (NaN-safe bitwise comparisons)."""
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(TRUSTED.equal(_bits(a), _bits(b)))


DIGEST_WIDTH = 1 << 20  # 64-bit words per row of the weighted sum
DIGEST_BLOCK_ROWS = 32  # rows per product: 256 MiB of int64 scratch at most
_MASK64 = (1 << 64) - 1


def _row_weight(row: int) -> int:
    """A row's weight in the weighted sum (odd, spread over 64 bits)."""
    return ((row + 1) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK64 | 1


def _digest(t: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's bits as numbers that hold no reference to it: its dtype and shape, and
    two sums over its 64-bit words mod 2**64, one plain and one weighted by a hash of each
    word's position (its row's weight times its column's, in rows of DIGEST_WIDTH words).
    Two tensors with the same digest are, short of a collision built on purpose, bit for
    bit the same; unlike a copy, a digest is nothing a candidate can rewrite while it
    runs (Python ints are immutable). The tensor is read in place (no copy of it as wider
    words), its column weights made afresh each time (nothing kept that a candidate could
    rewrite between two digests), and the partial sums read back at once: one
    synchronisation per tensor."""
    raw = _bits(t)
    bulk = raw.numel() - raw.numel() % 8
    try:
        words = raw[:bulk].view(torch.int64)
    except RuntimeError:  # a view not aligned to 8 bytes: a copy of it is
        words = raw[:bulk].clone().view(torch.int64)
    n = words.numel()
    width = min(DIGEST_WIDTH, max(1, n))
    at = torch.arange(width, device=words.device, dtype=torch.int64)
    columns = (at * 2654435761) % 4294967291 + 1
    rows = n // width
    parts = [words.sum().reshape(1)]
    table = words[: rows * width].view(rows, width)
    for r0 in range(0, rows, DIGEST_BLOCK_ROWS):
        parts.append((table[r0 : r0 + DIGEST_BLOCK_ROWS] * columns).sum(dim=1))
    rest = words[rows * width :]
    if rest.numel():
        parts.append((rest * columns[: rest.numel()]).sum().reshape(1))
    tail = raw[bulk:]
    if tail.numel():  # the last bytes (fewer than 8), as one more word
        parts.append(tail.to(torch.int64))
    values = torch.cat(parts).tolist()
    plain, sums = values[0], values[1 : len(values) - tail.numel()]
    weighted = sum(_row_weight(i) * v for i, v in enumerate(sums))
    if tail.numel():
        last = sum(b << (8 * i) for i, b in enumerate(values[len(values) - tail.numel() :]))
        plain += last
        weighted += _row_weight(len(sums)) * last
    return (str(t.dtype), tuple(t.shape), plain & _MASK64, weighted & _MASK64)


def _same_value(a: Any, b: Any) -> bool:
    """Tensors bit for bit; anything else (a KernelBench problem's int or float) by type
    and ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _same_bits(a, b)
    return type(a) is type(b) and bool(a == b)


def _children() -> set[int]:
    pids: set[int] = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids.update(int(p) for p in fh.read().split())
    except OSError:
        pass
    return pids


def _index_str(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"
