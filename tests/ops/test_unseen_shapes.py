"""Unseen shapes chosen against the suites (ops/spec.py UnseenShapes): on every check,
every dimension a kernel could specialise on takes values neither suite uses, one of
them odd and above the device suite's largest; head dims take a choice neither suite
uses (above the largest where the op has one). Within the interpreter's means on the
CPU, within half again the suite's costliest shape on a GPU."""

from __future__ import annotations

import math
import random

import pytest

from kernelladder.ops.registry import builtin_ops

SEEDS = range(300)
CPU_MAX_ELEMENTS = 30_000  # the largest input an unseen CPU shape may ask of the interpreter


def _rule_dims(spec, device):
    return {name: dim for name, dim in spec.unseen.dims.items() if dim.rule}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("spec", builtin_ops(), ids=lambda s: s.name)
def test_every_check_takes_every_dimension_beyond_the_suite(spec, device):
    suites = spec.gpu_shapes + spec.cpu_shapes
    local = spec.shapes_for(device)
    for seed in SEEDS:
        shapes = spec.draw_unseen_shapes(random.Random(seed), spec.unseen.count, device)
        assert len(shapes) == spec.unseen.count
        for name, dim in _rule_dims(spec, device).items():
            used = {s.dims[name] for s in suites}
            largest = max(s.dims[name] for s in local)
            values = [s.dims[name] for s in shapes]
            choices = dim.choices(device)
            if choices:
                fresh = [c for c in choices if c not in used]
                assert not fresh or all(v in fresh for v in values), (name, seed, values)
                if any(c > largest for c in fresh):
                    assert any(v > largest for v in values), (name, seed, values)
                continue
            assert not used & set(values), (name, seed, values)
            assert any(v > largest and v % 2 for v in values), (name, seed, values)


@pytest.mark.parametrize("spec", builtin_ops(), ids=lambda s: s.name)
def test_unseen_shapes_stay_within_the_devices_means(spec):
    for seed in SEEDS:
        for shape in spec.draw_unseen_shapes(random.Random(seed), spec.unseen.count, "cpu"):
            inputs = spec.input_layout(shape)
            largest = max(math.prod(size) for size, _dtype in inputs.values())
            assert largest <= CPU_MAX_ELEMENTS, (seed, shape.label)
    budget = 1.5 * max(spec.unseen_cost(s) for s in spec.gpu_shapes)
    for seed in SEEDS:
        for shape in spec.draw_unseen_shapes(random.Random(seed), spec.unseen.count, "cuda"):
            assert spec.unseen_cost(shape) <= budget, (seed, shape.label)


def test_the_suites_row_length_table_never_covers_the_beyond_shape():
    """The table cheat (tests/cheats/suite_lengths_only.py) divides by the padded block
    for any length it has not listed: wrong unless the length is a power of two. Every
    check has an odd row length it has not listed."""
    table = {100, 257, 64, 8192, 4096, 4097, 1000, 5120}
    spec = next(s for s in builtin_ops() if s.name == "rmsnorm")
    for device in ("cpu", "cuda"):
        for seed in SEEDS:
            lengths = {s.dims["N"] for s in spec.draw_unseen_shapes(random.Random(seed), 2, device)}
            assert any(n % 2 and n not in table for n in lengths), (device, seed, lengths)
