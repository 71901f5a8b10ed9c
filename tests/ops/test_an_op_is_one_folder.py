"""A new built-in op is one folder of the ops package: its __init__.py, spec.py (the
OpSpec named after the folder, in capitals), start.py (its starting kernel) and, for the
built-in search, families.py. The registry finds it with nothing listed anywhere else.

The folder is made under tmp_path and added to the ops package's search path in a fresh
interpreter (the package itself is not written to)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
import dataclasses

from kernelladder.ops.registry import start_path
from kernelladder.ops.softmax.spec import SOFTMAX

TOY = dataclasses.replace(SOFTMAX, name="toy", starting_candidate=str(start_path("toy")))
"""

FAMILIES = """\
from kernelladder.ops.softmax.families import FAMILIES as _SOFTMAX

FAMILIES = _SOFTMAX[:1]
NOTES = "toy: a row softmax under another name"
"""

PROBE = """\
import json, sys
import kernelladder.ops
kernelladder.ops.__path__.append(sys.argv[1])
from kernelladder.ops import registry
op = registry.load_op("toy")
print(json.dumps({
    "ops": list(registry.BUILTIN_OPS),
    "name": op.name,
    "start": op.starting_candidate,
    "wire": registry.op_to_wire(op),
    "from_wire": registry.op_from_wire("toy").name,
    "families": [f.name for f in registry.catalog().get("toy", ())],
}))
"""


def test_a_new_op_folder_is_found_without_being_listed(tmp_path: Path) -> None:
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""The built-in op toy."""\n')
    (folder / "spec.py").write_text(SPEC)
    (folder / "start.py").write_text((ROOT / "kernelladder/ops/softmax/start.py").read_text())
    (folder / "families.py").write_text(FAMILIES)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    # the five built-in ops keep their order; a folder without a PLACE comes after them
    assert found["ops"] == ["softmax", "rmsnorm", "attention", "int8_matmul", "kv_quant", "toy"]
    assert (found["name"], found["wire"], found["from_wire"]) == ("toy", "toy", "toy")
    assert found["start"] == str(folder / "start.py")
    assert len(found["families"]) == 1
