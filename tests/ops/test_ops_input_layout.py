"""Each built-in op's input_layout says what make_inputs makes (sizes, dtype, contiguous),
at its CPU suite and at unseen shapes: the pipelined verifier compiles a candidate ahead
on empty tensors of that layout, so a layout that drifted would compile the wrong kernels."""

from __future__ import annotations

import random

import pytest

from kernelladder.ops.registry import BUILTIN_OPS, get_op


@pytest.mark.parametrize("op_name", BUILTIN_OPS)
def test_the_layout_is_what_make_inputs_makes(op_name):
    spec = get_op(op_name)
    shapes = list(spec.cpu_shapes) + list(spec.draw_unseen_shapes(random.Random(3), 3, "cpu"))
    for shape in shapes:
        inputs = spec.make_inputs(shape, 0, "cpu")
        made = {name: (tuple(t.shape), t.dtype) for name, t in inputs.items()}
        assert spec.input_layout(shape) == made, shape.label
        assert all(t.is_contiguous() for t in inputs.values()), shape.label
