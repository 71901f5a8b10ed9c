"""Poisoned memory: an output the candidate allocates but never writes holds garbage.

GPU: just before each call the verifier empties the allocator's cache, allocates blocks
of each expected output's size (twice, and once double), fills them with 0xFF bytes (NaN
for floats, -1 for ints) and frees them, with small live spacers between them so they do
not coalesce; the caching allocator hands those exact-fit blocks back to the candidate's
torch.empty (best fit, same pool), so an unwritten element reads as NaN / -1.

CPU: torch allocates with glibc's malloc. The worker sets M_PERTURB so every heap
allocation starts as 0xFF bytes, and raises the mmap threshold to its maximum (32 MiB)
so the small CPU suites never get fresh zeroed mmap pages. `poison_check()` proves it
works at worker start (torch.empty must come back all NaN); the hello line says so.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch

M_MMAP_THRESHOLD = -3
M_PERTURB = -6
_PERTURB_VALUE = 0x100  # low byte 0x00: allocations are filled with ~0x00 = 0xFF
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def setup_cpu_malloc() -> str:
    """Make glibc fill fresh CPU allocations with 0xFF; returns what was done."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"
    ok_perturb = mallopt(M_PERTURB, _PERTURB_VALUE)
    ok_mmap = mallopt(M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    if ok_perturb != 1:
        return "mallopt(M_PERTURB) refused"
    return "glibc M_PERTURB=0xFF" + ("" if ok_mmap == 1 else " (mmap threshold unchanged)")


def poison_before_call(
    outputs: Sequence[tuple[tuple[int, ...], torch.dtype]], device: str
) -> list[torch.Tensor]:
    """Leave 0xFF-filled free blocks where the candidate's outputs will be allocated.

    Returns spacer blocks the caller keeps alive until the call returns: they sit between
    the freed poison blocks so those cannot coalesce into one larger free block, and each
    stays an exact (best) fit for an output-sized request.
    """
    if not device.startswith("cuda"):
        return []  # CPU: glibc's perturb byte does it on every allocation
    torch.cuda.empty_cache()  # no stale unpoisoned cached blocks left to hand out
    poisoned, spacers = [], []
    for shape, dtype in outputs:
        numel = 1
        for d in shape:
            numel *= int(d)
        nbytes = max(1, numel * torch.empty((), dtype=dtype).element_size())
        spacer_bytes = 512 if nbytes <= (1 << 20) else (1 << 20) + 512  # same pool
        for factor in (1, 1, 2):
            block = torch.empty(nbytes * factor, dtype=torch.uint8, device=device)
            block.fill_(0xFF)
            poisoned.append(block)
            spacers.append(torch.empty(spacer_bytes, dtype=torch.uint8, device=device))
    del poisoned  # back to the caching allocator, still holding 0xFF
    return spacers


def poison_check(device: str) -> str:
    """'verified' when an unwritten torch.empty output reads as NaN after poisoning."""
    try:
        for shape in ((37, 129), (1024, 1024)):  # the small and the large pool
            keep = poison_before_call([(shape, torch.float32)], device)
            probe = torch.empty(shape, dtype=torch.float32, device=device)
            del keep
            if not bool(torch.isnan(probe).all()):
                return f"not verified: an unwritten {list(shape)} allocation did not read as NaN"
        return "verified"
    except Exception as exc:
        return f"not verified ({type(exc).__name__})"
