"""Pieces every gate uses: the signals that end a candidate's trials, bitwise tensor
comparison, shape indices in text, the worker's child processes. Torch and stdlib only."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from kernelladder.verifier.worker.integrity import TRUSTED


class _Stop(Exception):
    """Ends the trials early; the gate results so far say why."""


class _Broken(Exception):
    """The CUDA context is unusable (illegal memory access...): a crash verdict."""


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (NaN-safe bitwise comparisons)."""
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(TRUSTED.equal(_bits(a), _bits(b)))


DIGEST_CHUNK = 1 << 24  # 32-bit words per step: 384 MiB of int64 scratch at most
_MASK64 = (1 << 64) - 1


def _digest(t: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's bits as numbers that hold no reference to it: its dtype and shape, and
    two sums over its 32-bit words mod 2**64, one plain and one weighted by a hash of each
    word's position. Two tensors with the same digest are, short of a collision built on
    purpose, bit for bit the same; unlike a copy, a digest is nothing a candidate can
    rewrite while it runs (Python ints are immutable)."""
    raw = _bits(t)
    pad = (-raw.numel()) % 4
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    words = raw.view(torch.int32)
    sums = []  # per chunk, on the tensor's device: read back at once (one sync, not two a chunk)
    for lo in range(0, words.numel(), DIGEST_CHUNK):
        w = words[lo : lo + DIGEST_CHUNK].to(torch.int64)
        at = torch.arange(lo, lo + w.numel(), device=w.device, dtype=torch.int64)
        weight = (at * 2654435761) % 4294967291 + 1
        sums.append(torch.stack((w.sum(), (w * weight).sum())))
    plain = weighted = 0
    if sums:
        for chunk_plain, chunk_weighted in torch.stack(sums).tolist():
            plain += chunk_plain
            weighted += chunk_weighted
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
