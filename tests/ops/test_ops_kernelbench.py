"""KernelBench-format problems: loading from source, seeded weights and inputs, the fp64
reference, bad problem files, the registry and the wire form."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest
import torch
from helpers import ROOT

from kernelladder.ops.kernelbench import MODEL_SEED, KernelBenchSpec
from kernelladder.ops.registry import OpLoadError, get_op, load_op, op_from_wire, op_to_wire

EXAMPLES = ROOT / "examples" / "kernelbench"
PROBLEM = EXAMPLES / "relu_bias_scale.py"


def _load_model_new(path: Path):
    name = f"kl_test_kb_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew


@pytest.fixture(scope="module")
def problem() -> KernelBenchSpec:
    op = load_op(str(PROBLEM))
    assert isinstance(op, KernelBenchSpec)
    return op


def test_problem_file_loads_as_an_op(problem):
    assert problem.kind == "kernelbench" and problem.name == "relu_bias_scale"
    assert problem.arg_names == ("input0",) and problem.output_names == ("output0",)
    assert problem.expected_outputs(problem.cpu_shapes[0]) == (((16, 300), torch.float32),)
    assert problem.cpu_shapes[0].dtype == "float32" and "[16, 300]" in problem.cpu_shapes[0].label
    assert problem.bytes_moved(problem.cpu_shapes[0]) == 2 * 16 * 300 * 4
    assert problem.flops(problem.cpu_shapes[0]).count == 0
    assert problem.forbidden_aten == frozenset() and "Triton" in problem.fence
    assert problem.init_inputs() == [300, 0.5]


def test_inputs_are_seeded_and_leave_the_global_rng_alone(problem):
    shape = problem.cpu_shapes[0]
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = problem.make_inputs(shape, 5, "cpu")
    b = problem.make_inputs(shape, 5, "cpu")
    c = problem.make_inputs(shape, 6, "cpu")
    assert torch.equal(torch.rand(3), before)
    assert torch.equal(a["input0"], b["input0"]) and not torch.equal(a["input0"], c["input0"])


@pytest.mark.parametrize(
    ("candidate", "passes"),
    [("relu_bias_scale_triton.py", True), ("relu_bias_scale_wrong.py", False)],
)
def test_candidate_models_get_the_reference_weights(problem, candidate, passes):
    model = problem.build_candidate(_load_model_new(EXAMPLES / candidate), "cpu")
    reference_model = problem.build_model(problem.module.Model, "cpu")
    assert torch.equal(model.bias, reference_model.bias)  # same seed, same parameters
    shape = problem.cpu_shapes[0]
    for seed in (0, 1):
        inputs = problem.make_inputs(shape, seed, "cpu")
        with torch.no_grad():
            out = model(*[inputs[n] for n in problem.arg_names])
        hp = problem.reference_hp(inputs)
        assert hp[0].dtype == torch.float64
        assert problem.compare(problem.reference(inputs), hp, inputs, shape) is None
        assert (problem.compare((out,), hp, inputs, shape) is None) == passes


GOOD = PROBLEM.read_text()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (GOOD.replace("class Model(", "class Thing("), "missing Model"),
        (GOOD.replace("def get_inputs(", "def inputs("), "missing get_inputs"),
        (GOOD.replace("def get_init_inputs(", "def init_inputs("), "missing get_init_inputs"),
        ("def broken(:\n", "syntax error at line 1"),
        ("import no_such_module_kl\n", "failed to import: ModuleNotFoundError"),
        ("raise SystemExit(3)\n", "failed to import: SystemExit"),
        (
            GOOD.replace(
                "return torch.relu(x + self.bias)", "return torch.relu(x[:, :5] + self.bias)"
            ),
            "running Model",
        ),
    ],
    ids=[
        "no-Model",
        "no-get_inputs",
        "no-get_init_inputs",
        "syntax",
        "import",
        "sys-exit",
        "forward-fails",
    ],
)
def test_bad_problem_files_give_one_line_errors(source, message):
    with pytest.raises(OpLoadError) as info:
        KernelBenchSpec.from_source(source, name="bad.py")
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("problem bad.py")


def test_registry_names_paths_and_wire_forms(tmp_path):
    assert get_op("rmsnorm").name == "rmsnorm"
    with pytest.raises(OpLoadError, match=r"unknown op 'nope' \(known: softmax, rmsnorm"):
        get_op("nope")
    with pytest.raises(OpLoadError, match="problem file not found"):
        load_op(str(tmp_path / "missing.py"))
    assert op_to_wire(get_op("softmax")) == "softmax"
    assert op_from_wire("kv_quant").name == "kv_quant"
    op = load_op(str(PROBLEM))
    wire = op_to_wire(op)
    assert wire == {"kernelbench": GOOD, "name": "relu_bias_scale"}
    again = op_from_wire(wire)
    assert again.kind == "kernelbench" and again.arg_names == op.arg_names
    with pytest.raises(OpLoadError):
        op_from_wire({"something": 1})
    assert again.describe()["model_seed"] == MODEL_SEED
