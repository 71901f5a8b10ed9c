"""The search's kernel templates: every family renders valid Python, and a sample of the
generated candidates compute the right thing under the real Triton interpreter (tiny fp32
shapes against plain torch math; kv_quant against its op spec's near-tie rule)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from helpers import load_source

from kernelladder.engine.record.upcast import search_header as parse_header
from kernelladder.ops.family import Family, config_key
from kernelladder.ops.registry import catalog

CATALOG = catalog()


def _neighbours(family: Family) -> list[dict]:
    """The start point and every single-parameter change of it."""
    points = [dict(family.start)]
    for p in family.params:
        for value in p.values:
            point = {**family.start, p.name: value}
            if point not in points and family.valid(point):
                points.append(point)
    return points


def test_catalog_covers_the_five_ops_with_distinct_families():
    assert set(CATALOG) == {"softmax", "rmsnorm", "attention", "int8_matmul", "kv_quant"}
    for op, families in CATALOG.items():
        names = [f.name for f in families]
        assert len(names) >= 3 and len(set(names)) == len(names), op
        for f in families:
            assert f.op == op
            assert set(f.start) == {p.name for p in f.params}, f.name
            for p in f.params:
                assert f.start[p.name] in p.values, (f.name, p.name)
            assert f.valid(f.start), f.name


DIGESTS = Path(__file__).resolve().parents[1] / "data" / "template-render-digests.json"


def test_every_family_renders_the_same_sources_as_its_recorded_digest():
    """The start point and its single-parameter neighbours render byte for byte as
    recorded (sha256 over the sources): a refactor of the templates changes no candidate.
    A deliberate change of a template updates its row here."""
    import hashlib
    import json

    recorded = json.loads(DIGESTS.read_text(encoding="utf-8"))
    rendered = {}
    for op, families in CATALOG.items():
        for family in families:
            digest = hashlib.sha256()
            for point in _neighbours(family):
                digest.update(family.render(point).encode() + b"\0")
            rendered[f"{op}/{family.name}"] = digest.hexdigest()
    assert rendered == recorded


@pytest.mark.parametrize("op", sorted(CATALOG))
def test_every_template_renders_valid_python_with_a_readable_header(op):
    for family in CATALOG[op]:
        for point in _neighbours(family):
            source = family.render(point)
            tree = ast.parse(source)
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert "kernel" in names
            assert any(
                isinstance(d, ast.Attribute) and d.attr == "jit"
                for n in tree.body
                if isinstance(n, ast.FunctionDef)
                for d in n.decorator_list
            )
            header = parse_header(source)
            assert header == {"op": op, "family": family.name, "params": point}
            assert config_key(op, family.name, header["params"]) == config_key(
                op, family.name, point
            )


def test_render_rejects_a_missing_parameter():
    family = CATALOG["softmax"][0]
    params = dict(family.start)
    params.pop(family.params[0].name)
    with pytest.raises(ValueError, match="missing parameters"):
        family.render(params)


def test_parse_header_ignores_foreign_sources():
    assert parse_header("import triton\n") is None
    assert parse_header("# kernelladder-search: {not json}\n") is None
    assert parse_header(None) is None


# --- correctness under the interpreter ----------------------------------------------------

# For each family: its start and one variant that takes another code path.
VARIANTS = {
    "rmsnorm": {
        "multi-row": {"ROWS": 1},
        "one-row-per-program": {"MAX_BLOCK": 8192, "Y_CACHE": ".cs"},
        "two-pass": {"MAX_BLOCK": 1024, "CHUNK": 1024},
        "persistent": {"PREFETCH": False, "ROWS": 2},
    },
    "softmax": {
        "one-pass": {"ROWS": 4, "EXP2": False},
        "online": {"CHUNK": 1024},
        "persistent": {"PREFETCH": False, "ROWS": 2},
        "split-row": {"SEGMENT": 1024, "SPLIT_BELOW_ROWS_PER_SM": 8},
    },
    "attention": {
        "flash-split": {"BLOCK_M": 64, "BLOCK_N": 32},
        "flash-masked": {"EXP2": False},
        "flash-lpt": {"BLOCK_M": 64},
        "flash-tma": {"BLOCK_M": 128, "BLOCK_N": 32, "NUM_WARPS": 8, "REVERSE": True},
        "flash-ring": {"BLOCK_M": 128, "BLOCK_N": 32, "HEAD_GROUP": 1, "WS": True},
        "flash-persistent": {"BLOCK_M": 128, "BLOCK_N": 32, "PROGRAMS_PER_SM": 1},
        "flash-wgmma": {"WS": False, "BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 3},
    },
    "int8_matmul": {
        "tiled": {"PAD": False, "GROUP_M": 1},
        "persistent": {"PROGRAMS_PER_SM": 2},
        "split-k": {"SPLIT_K": 2},
    },
    "kv_quant": {
        "multi-row": {"QDIV": "rn", "ROWS": 4},
        "persistent": {"PREFETCH": False},
        "one-row-per-program": {"QDIV": "div"},
    },
}


def _points(op: str):
    for family in CATALOG[op]:
        yield family, dict(family.start)
        yield family, {**family.start, **VARIANTS[op][family.name]}


def test_variants_name_real_families_and_parameters():
    for op, by_family in VARIANTS.items():
        names = {f.name: f for f in CATALOG[op]}
        assert set(by_family) == set(names), op
        for fam, over in by_family.items():
            for k, v in over.items():
                assert v in names[fam].param(k).values


def _rows(m: int, n: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, n, generator=gen) * 3
    x[0] *= 1e4  # a row that overflows exp() without the max subtracted
    if m > 2:
        x[m - 1] = 0.0
    return x


# (M, N): tail columns, an exact power of two (the unmasked path), rows past a chunk, tiny M
ROW_SHAPES = [(5, 37), (8, 64), (3, 300), (1, 3000)]


def test_rmsnorm_candidates_match_torch(tmp_path):
    gen = torch.Generator().manual_seed(0)
    for i, (family, point) in enumerate(_points("rmsnorm")):
        module = load_source(family.render(point), tmp_path, f"rmsnorm_{i}")
        for m, n in ROW_SHAPES:
            x, w = _rows(m, n, gen), torch.randn(n, generator=gen)
            y = module.kernel(x, w)
            xd = x.double()
            ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
            assert y.dtype == x.dtype and y.shape == x.shape
            torch.testing.assert_close(
                y.double(), ref, rtol=1e-5, atol=1e-6, msg=f"{family.name} {point} {m}x{n}"
            )


def test_softmax_candidates_match_torch(tmp_path):
    gen = torch.Generator().manual_seed(1)
    for i, (family, point) in enumerate(_points("softmax")):
        module = load_source(family.render(point), tmp_path, f"softmax_{i}")
        for m, n in ROW_SHAPES:
            x = _rows(m, n, gen)
            y = module.kernel(x)
            ref = torch.softmax(x.double(), dim=-1)
            assert y.dtype == x.dtype and not torch.isnan(y).any()
            torch.testing.assert_close(
                y.double(), ref, rtol=1e-5, atol=1e-7, msg=f"{family.name} {point} {m}x{n}"
            )


def test_long_rows_take_the_chunked_fallback(tmp_path):
    gen = torch.Generator().manual_seed(2)
    x, w = _rows(2, 9000, gen), torch.randn(9000, generator=gen)
    family = CATALOG["rmsnorm"][0]
    module = load_source(family.render({**family.start, "MAX_BLOCK": 8192}), tmp_path, "rms_long")
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    torch.testing.assert_close(module.kernel(x, w).double(), ref, rtol=1e-5, atol=1e-6)
    family = CATALOG["softmax"][0]
    module = load_source(family.render({**family.start, "MAX_BLOCK": 8192}), tmp_path, "sm_long")
    torch.testing.assert_close(
        module.kernel(x).double(), torch.softmax(x.double(), -1), rtol=1e-5, atol=1e-7
    )


def _causal_attention(q, k, v):
    s = q.shape[2]
    scores = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v.double()


def test_attention_candidates_match_torch(tmp_path):
    gen = torch.Generator().manual_seed(3)
    # S=150 spans several 64-row query blocks (the unmasked loop runs); D=24 is not a power of 2
    shapes = [(1, 2, 150, 16), (2, 1, 37, 24)]
    for i, (family, point) in enumerate(_points("attention")):
        module = load_source(family.render(point), tmp_path, f"attention_{i}")
        for b, h, s, d in shapes:
            q, k, v = (torch.randn(b, h, s, d, generator=gen) for _ in range(3))
            o = module.kernel(q, k, v)
            assert o.shape == q.shape and o.dtype == q.dtype
            torch.testing.assert_close(
                o.double(),
                _causal_attention(q, k, v),
                rtol=1e-4,
                atol=1e-5,
                msg=f"{family.name} {point} {s}x{d}",
            )


def test_int8_matmul_candidates_are_exact_before_the_bf16_cast(tmp_path):
    gen = torch.Generator().manual_seed(4)
    # K=70 and 1001 are unaligned (padding path); 20x24x1000 is small enough for split-K
    shapes = [(5, 40, 96), (33, 17, 70), (20, 24, 1000)]
    for i, (family, point) in enumerate(_points("int8_matmul")):
        module = load_source(family.render(point), tmp_path, f"int8_{i}")
        for m, n, kk in shapes:
            a = torch.randint(-128, 128, (m, kk), dtype=torch.int8, generator=gen)
            b = torch.randint(-128, 128, (n, kk), dtype=torch.int8, generator=gen)
            sa, sb = torch.rand(m, generator=gen) + 0.1, torch.rand(n, generator=gen) + 0.1
            c = module.kernel(a, b, sa, sb)
            ref = (a.long() @ b.long().T).double() * sa.double()[:, None] * sb.double()[None, :]
            assert c.dtype == torch.bfloat16 and c.shape == (m, n)
            # bf16 keeps 8 bits; the interpreter's fp32->bf16 cast truncates
            torch.testing.assert_close(
                c.double(), ref, rtol=2**-7, atol=1e-3, msg=f"{family.name} {point}"
            )


def test_kv_quant_candidates_pass_the_op_spec(tmp_path):
    from kernelladder.ops.registry import get_op
    from kernelladder.ops.spec import Shape

    spec = get_op("kv_quant")
    shapes = [
        Shape("t", {"T": 7, "H": 3, "D": 24}, "bfloat16"),
        Shape("u", {"T": 5, "H": 2, "D": 64}, "bfloat16"),
    ]
    for i, (family, point) in enumerate(_points("kv_quant")):
        module = load_source(family.render(point), tmp_path, f"kvq_{i}")
        for shape in shapes:
            inputs = spec.make_inputs(shape, 0, "cpu")  # zero rows, outliers, exact ties
            outputs = module.kernel(inputs["x"])
            for out, (dims, dtype) in zip(outputs, spec.expected_outputs(shape), strict=True):
                assert tuple(out.shape) == dims and out.dtype == dtype
            mismatch = spec.compare(outputs, spec.reference_hp(inputs), inputs, shape)
            assert mismatch is None, (family.name, point, mismatch)
