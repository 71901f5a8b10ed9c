"""kv_quant's comparison rule: exact codes, except off by one at a near-tie of x / scale."""

from __future__ import annotations

import torch

from kernelladder.ops.kv_quant.spec import TIE_EPS, compare_codes, near_tie
from kernelladder.ops.registry import get_op
from kernelladder.ops.spec import Shape

OP = get_op("kv_quant")


def _tie_row_inputs() -> dict[str, torch.Tensor]:
    # One row: absmax 127 -> scale exactly 1, so x / scale is x and 2.5 is an exact tie.
    d = 8
    row = torch.tensor([127.0, 2.5, -3.5, 0.5, 1.25, -7.0, 3.0, 10.75])
    return {"x": row.reshape(1, 1, d).to(torch.bfloat16)}


SHAPE = Shape("tie", {"T": 1, "H": 1, "D": 8}, "bfloat16")


def test_reference_rounds_half_to_even_and_scale_is_exact():
    inputs = _tie_row_inputs()
    q, scale = OP.reference(inputs)
    assert scale.item() == 1.0
    assert q.reshape(-1).tolist() == [127, 2, -4, 0, 1, -7, 3, 11]
    q_hp, scale_hp = OP.reference_hp(inputs)
    assert torch.equal(q_hp.to(torch.int8), q) and scale_hp.item() == 1.0


def test_off_by_one_at_a_tie_passes():
    inputs = _tie_row_inputs()
    q, scale = OP.reference(inputs)
    away = q.clone()
    away[0, 0, 1] = 3  # 2.5 rounded half away from zero
    away[0, 0, 2] = -3  # -3.5 rounded half toward zero: also one off at a tie
    assert OP.compare((away, scale), OP.reference_hp(inputs), inputs, SHAPE) is None


def test_off_by_one_away_from_a_tie_fails_with_the_reason():
    inputs = _tie_row_inputs()
    q, scale = OP.reference(inputs)
    wrong = q.clone()
    wrong[0, 0, 4] = 2  # 1.25 must round to 1
    miss = OP.compare((wrong, scale), OP.reference_hp(inputs), inputs, SHAPE)
    assert miss is not None and miss.output == "q" and miss.index == (0, 0, 4)
    assert miss.expected == 1 and miss.saw == 2 and miss.allowed == 0
    assert "not a near-tie" in miss.reason


def test_off_by_two_at_a_tie_fails():
    inputs = _tie_row_inputs()
    q, scale = OP.reference(inputs)
    wrong = q.clone()
    wrong[0, 0, 1] = 4
    miss = OP.compare((wrong, scale), OP.reference_hp(inputs), inputs, SHAPE)
    assert miss is not None and miss.error == 2 and miss.allowed == 1


def test_scale_off_by_a_wrong_formula_fails():
    op_shape = OP.cpu_shapes[0]
    inputs = OP.make_inputs(op_shape, 0, "cpu")
    q, scale = OP.reference(inputs)
    for wrong in (scale * 127 / 128, scale * (1 + 1e-5)):
        miss = OP.compare((q, wrong), OP.reference_hp(inputs), inputs, op_shape)
        assert miss is not None and miss.output == "scale"


def test_scale_from_a_reciprocal_multiply_passes():
    # absmax * (1/127) in fp32 is a legitimate formula (within 2 fp32 roundings).
    op_shape = OP.cpu_shapes[0]
    inputs = OP.make_inputs(op_shape, 1, "cpu")
    q, _ = OP.reference(inputs)
    absmax = inputs["x"].float().abs().amax(-1)
    scale = torch.where(
        absmax == 0, torch.ones_like(absmax), absmax * torch.tensor(1 / 127, dtype=torch.float32)
    )
    assert OP.compare((q, scale), OP.reference_hp(inputs), inputs, op_shape) is None


def test_near_tie_window():
    ratio = torch.tensor([2.5, -2.5, 2.5 + TIE_EPS / 2, 2.5 + 2 * TIE_EPS, 3.0, -0.5004])
    assert near_tie(ratio).tolist() == [True, True, True, False, False, True]


def test_compare_codes_counts_every_bad_code():
    ratio = torch.tensor([0.2, 1.5, 7.0, -3.0])
    ref = torch.tensor([0, 2, 7, -3], dtype=torch.int16)
    out = torch.tensor([1, 1, 5, -3], dtype=torch.int8)
    miss = compare_codes("q", out, ref, ratio)
    assert miss is not None and miss.count == 2 and miss.total == 4
    assert miss.index == (2,) and miss.error == 2  # the worst one
