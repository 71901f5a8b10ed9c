"""The inputs a candidate's call is judged against, kept out of its reach.

The candidate runs in the verifier's process and can reach any object in it (gc,
frames): a copy of its inputs or a reference output alive during its call is a copy it
could rewrite to agree with a wrong result (tests/cheats/overwrites_reference.py). So
the inputs are drawn again after the call, from their seed, and the reference is
computed from that draw: nothing the judgement reads exists while the candidate runs.
An op whose inputs do not come out the same twice (a KernelBench problem or a workspace
drawing from an unseeded source) is checked against a copy taken before the call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernelladder.ops.spec import OpSpec, Shape
from kernelladder.verifier.worker.gate_tools import _same_value
from kernelladder.verifier.worker.integrity import TRUSTED


def redrawable(spec: OpSpec, shape: Shape, seed: int, device: str, known: dict) -> bool:
    """Whether `spec`'s inputs at `shape` come out bit for bit the same when drawn again
    from their seed: the built-in ops by construction (seeded generators, tests/ops), the
    others as two draws found them (once per worker: `known`, by op and shape)."""
    if spec.kind == "builtin":
        return True
    key = (spec.name, shape.label)
    found = known.get(key)
    if found is None:
        first = spec.make_inputs(shape, seed, device)
        again = spec.make_inputs(shape, seed, device)
        found = first.keys() == again.keys() and all(_same_value(first[n], again[n]) for n in first)
        known[key] = found
    return found


def held_copy(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the inputs, taken now, to hold through the call."""
    return {
        name: TRUSTED.tensor_clone(t) if isinstance(t, torch.Tensor) else t
        for name, t in inputs.items()
    }
