"""A built-in op's suite is written as its labels (ops/_common.py `suite`): the sizes and
the dtype are read from each label, so a label cannot say one shape while the suite runs
another; a label it cannot read is refused when the op is defined."""

from __future__ import annotations

import pytest

from kernelladder.ops import _common
from kernelladder.ops.registry import builtin_ops


def test_sizes_in_order_or_by_name_and_the_dtype_come_from_the_label():
    plain, tail, named = _common.suite(
        "M N K", "int8", "8192x8192x8192", "tail 1037x999x1001", "tiny M1 N4096 K4096"
    )
    assert plain.dims == {"M": 8192, "N": 8192, "K": 8192} and plain.dtype == "int8"
    assert tail.label == "tail 1037x999x1001" and tail.dims == {"M": 1037, "N": 999, "K": 1001}
    assert named.dims == {"M": 1, "N": 4096, "K": 4096}
    (row,) = _common.suite("M N", "", "tail 3x4097 bf16")
    assert row.dims == {"M": 3, "N": 4097} and row.dtype == "bfloat16"


@pytest.mark.parametrize(
    "label",
    ["8192x8192", "M1 N4096", "7x100 int4", "7x100x3 fp32", "7x100"],
    ids=["a size short", "a name short", "unknown word", "a size too many", "no dtype"],
)
def test_a_label_it_cannot_read_is_refused(label):
    dtype = "int8" if label.startswith(("8192", "M1")) else ""
    with pytest.raises(ValueError, match="shape label"):
        _common.suite("M N K" if dtype else "M N", dtype, label)


@pytest.mark.parametrize("spec", builtin_ops(), ids=lambda s: s.name)
def test_every_builtin_label_names_its_own_sizes(spec):
    for shape in spec.gpu_shapes + spec.cpu_shapes:
        words = shape.label.split()
        sizes = [str(v) for v in shape.dims.values()]
        assert "x".join(sizes) in words or all(f"{k}{v}" in words for k, v in shape.dims.items()), (
            shape
        )
