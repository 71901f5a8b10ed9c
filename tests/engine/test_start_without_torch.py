"""A run of a built-in op starts without importing torch in the caller's process
(issue 25: on a GPU box the CLI's own import of torch cost 1.5-2 s before the first
attempt): the op's OpInfo is kept on disk per checkout, and the GPU is found from the
driver's entries when torch is a CUDA build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelladder.engine.run import op_info
from kernelladder.engine.run.op_info import OpInfo, cached_builtin, load_op_info, ops_digest
from kernelladder.engine.runners import local
from kernelladder.ops.registry import BUILTIN_OPS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELLADDER_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_kept_op_is_the_op_loaded(cache_dir: Path) -> None:
    loaded = op_info._load("attention")
    assert cached_builtin("attention") is None  # nothing kept yet
    assert load_op_info("attention") == loaded  # loaded, and every built-in op kept
    data = json.loads((cache_dir / "op_info.json").read_text())
    assert sorted(data["ops"]) == sorted(BUILTIN_OPS)
    assert data["ops_digest"] == ops_digest()
    for name in BUILTIN_OPS:
        assert cached_builtin(name) == op_info._load(name)


def test_a_kept_op_of_other_ops_files_is_not_used(cache_dir: Path) -> None:
    load_op_info("softmax")
    path = cache_dir / "op_info.json"
    data = json.loads(path.read_text())
    data["ops"]["softmax"]["description"]["summary"] = "edited"
    path.write_text(json.dumps(data))
    assert cached_builtin("softmax").description["summary"] == "edited"  # the file is read
    data["ops_digest"] = "0" * 64  # the ops package changed since
    path.write_text(json.dumps(data))
    assert cached_builtin("softmax") is None
    assert load_op_info("softmax") == op_info._load("softmax")
    path.write_text("{not json")
    assert cached_builtin("softmax") is None
    data["ops_digest"], data["schema_version"] = ops_digest(), 99
    path.write_text(json.dumps(data))
    assert cached_builtin("softmax") is None


def test_the_digest_follows_every_ops_file(tmp_path: Path) -> None:
    (tmp_path / "toy").mkdir()
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "toy" / "start.py").write_text("B = 1\n")
    before = ops_digest(tmp_path)
    (tmp_path / "toy" / "start.py").write_text("B = 2\n")
    assert ops_digest(tmp_path) != before


def test_the_digest_reads_the_ops_package_itself(tmp_path: Path) -> None:
    """By default the digest covers the package's own ops (every op folder's spec and
    start), not an empty or misplaced folder whose digest never changes."""
    import kernelladder.ops

    assert ops_digest() == ops_digest(Path(kernelladder.ops.__file__).parent)
    assert ops_digest() != ops_digest(tmp_path)


def test_a_start_file_over_a_kept_op(cache_dir: Path, tmp_path: Path) -> None:
    load_op_info("rmsnorm")
    mine = tmp_path / "mine.py"
    mine.write_text("# my kernel\n")
    info = load_op_info("rmsnorm", str(mine))
    assert (info.starting_source, info.start_label) == ("# my kernel\n", "your kernel (mine.py)")
    assert cached_builtin("rmsnorm").starting_source != "# my kernel\n"  # the kept one stands


def test_an_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KERNELLADDER_CACHE_DIR", str(blocker / "under-a-file"))
    assert isinstance(load_op_info("kv_quant"), OpInfo)


def test_a_cpu_run_does_not_import_torch_in_the_cli(cache_dir: Path, tmp_path: Path) -> None:
    """The whole command, in a fresh interpreter, once the op is kept: torch is imported
    only by the verifier's worker (its own process)."""
    load_op_info("rmsnorm")  # keep the built-in ops in this test's cache
    argv = ["optimize", "rmsnorm", "--device", "cpu", "--max-attempts", "1", "--gate", "approve",
            "--no-confirm", "--profile", "off", "--run-dir", str(tmp_path / "run")]  # fmt: skip
    out = _cli_in_a_fresh_interpreter(argv, tmp_path)
    assert "TORCH False" in out.stdout, out.stdout + out.stderr
    assert "best: #1" in out.stdout


@pytest.mark.skipif(not local.torch_built_for_cpu_only(), reason="torch here is a GPU build")
@pytest.mark.parametrize(
    "argv",
    [
        ["optimize", "rmsnorm", "--max-attempts", "1", "--gate", "approve", "--no-confirm"],
        ["check", "rmsnorm", str(ROOT / "kernelladder" / "ops" / "rmsnorm" / "start.py")],
    ],
    ids=["optimize", "check"],
)
def test_a_cpu_build_of_torch_is_not_imported_to_choose_the_device(
    argv: list[str], cache_dir: Path, tmp_path: Path
) -> None:
    """With no --device and a CPU build of torch (its version.py names no CUDA or ROCm
    version), the device is the CPU, told without importing torch: a run or a check of
    a built-in op imports torch only in the verifier's worker."""
    load_op_info("rmsnorm")
    out = _cli_in_a_fresh_interpreter(argv, tmp_path)
    assert "TORCH False" in out.stdout, out.stdout + out.stderr
    assert ("best: #1" if argv[0] == "optimize" else "PASS") in out.stdout, out.stdout


def test_the_gpu_is_found_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "gpus_without_torch", lambda environ=None: 2)
    monkeypatch.setattr(local, "torch_built_with_cuda", lambda: True)
    assert (local.default_device(), local._gpu_count()) == ("cuda", 2)
    # a CPU build of torch beside a driver: torch is asked (here: a CPU machine)
    monkeypatch.setattr(local, "torch_built_with_cuda", lambda: False)
    assert local.gpus_seen_without_torch() == 0
    monkeypatch.setattr(local, "gpus_without_torch", lambda environ=None: 0)
    monkeypatch.setattr(local, "torch_built_with_cuda", lambda: True)
    assert local.gpus_seen_without_torch() == 0


@pytest.mark.parametrize(
    ("line", "cuda"),
    [
        ("cuda: Optional[str] = '13.0'", True),
        ("cuda = '12.8'", True),
        ("cuda: Optional[str] = None", False),
        ("hip: Optional[str] = None", False),
    ],
)
def test_a_cuda_build_is_read_from_version_py(line: str, cuda: bool) -> None:
    text = f"__version__ = '2.11.0'\ndebug = False\n{line}\ngit_version = 'abc'\n"
    assert local.cuda_in_version_py(text) is cuda


@pytest.mark.parametrize(
    ("cuda", "hip", "cpu_only"),
    [("None", "None", True), ("'13.0'", "None", False), ("None", "'6.4.4'", False)],
)
def test_a_build_for_the_cpu_alone_is_told_from_version_py(
    cuda: str, hip: str, cpu_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a torch with neither a CUDA nor a ROCm version is taken for the CPU without
    asking it (a ROCm build's GPUs are torch.cuda's too); a version.py that cannot be
    read, or of another shape, leaves the question to torch."""
    text = f"__version__ = '2.11.0'\ncuda: Optional[str] = {cuda}\nhip: Optional[str] = {hip}\n"
    monkeypatch.setattr(local, "_torch_version_py", lambda: text)
    assert local.torch_built_for_cpu_only() is cpu_only
    monkeypatch.setattr(local, "_torch_version_py", lambda: None)
    assert local.torch_built_for_cpu_only() is False
    monkeypatch.setattr(local, "_torch_version_py", lambda: "__version__ = '9.9'\n")
    assert local.torch_built_for_cpu_only() is False


def _cli_in_a_fresh_interpreter(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`kernelladder ARGV` in a fresh interpreter, which then prints whether torch was
    imported in it (TORCH True/False)."""
    script = (
        "import runpy, sys\n"
        f"sys.argv = ['kernelladder', *{argv!r}]\n"
        "try:\n    runpy.run_module('kernelladder', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELLADDER_KEEP_WORKERS": "0"}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240,
        cwd=cwd,
    )  # fmt: skip
