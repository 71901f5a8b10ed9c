"""The layer rule, proven in fresh interpreters: app -> deploy -> engine -> verifier -> ops.

ops and verifier run alone on a GPU box with only torch + triton: they never import
rich, textual, networkx, anthropic, asyncssh or the engine/deploy/app layers. The engine
never imports textual, the app or deploy; deploy (a kernel inside a model) never imports
textual, the app or the CLI, and transformers only when it builds a model. Inside the
verifier the sandboxed worker never imports the caller's host code (nor the reverse), and
code outside the engine imports only its door, `kernelladder.engine`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import importlib, json, pkgutil, sys
pkg = importlib.import_module(sys.argv[1])
names = [sys.argv[1]]
for info in pkgutil.walk_packages(pkg.__path__, sys.argv[1] + "."):
    if info.name.endswith((".start", "__main__")):
        continue  # an op's start is a Triton source the worker loads, not a module
    names.append(info.name)
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""

BELOW_APP = ("textual", "kernelladder.app")
VERIFIER_FORBIDDEN = (
    "rich",
    "textual",
    "networkx",
    "anthropic",
    "asyncssh",
    "kernelladder.engine",
    "kernelladder.deploy",
    "kernelladder.app",
    "kernelladder.cli",
)

VERIFIER_SIDES = ("kernelladder.verifier.host", "kernelladder.verifier.worker")

LAYERS = {
    "kernelladder.ops": VERIFIER_FORBIDDEN,
    "kernelladder.verifier": VERIFIER_FORBIDDEN,
    # what both of the verifier's processes share: no torch, neither side
    "kernelladder.verifier.contract": (*VERIFIER_FORBIDDEN, "torch", "triton", *VERIFIER_SIDES),
    # the caller's process (the engine's): no torch, nothing of the worker's
    "kernelladder.verifier.host": (*VERIFIER_FORBIDDEN, "torch", "triton", VERIFIER_SIDES[1]),
    "kernelladder.verifier.worker": (*VERIFIER_FORBIDDEN, VERIFIER_SIDES[0]),
    "kernelladder.engine": (*BELOW_APP, "kernelladder.deploy"),
    "kernelladder.deploy": (*BELOW_APP, "kernelladder.cli", "transformers"),
}


def _imported(package: str) -> tuple[list[str], list[str]]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, package],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["imported"], out["modules"]


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layer_imports_nothing_above_it(package):
    imported, modules = _imported(package)
    assert len(imported) > 1  # the walk found the layer's modules
    bad = sorted(m for m in modules for f in LAYERS[package] if m == f or m.startswith(f + "."))
    assert not bad, f"{package} pulled in {bad[:10]}"


def test_package_root_is_import_free():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kernelladder; print(len([m for m in sys.modules if m.startswith(('torch', 'rich', 'textual'))]))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "0"


def _module_imports(package_root: Path) -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports at module level
    (type-only imports included; imports inside functions, made on use, are not)."""
    import ast

    def name_of(path: Path) -> str:
        parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name_of(p): p for p in package_root.rglob("*.py") if p.name != "start.py"}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            for n in ast.walk(node):
                if isinstance(n, ast.Import):
                    found.update(a.name for a in n.names)
                elif isinstance(n, ast.ImportFrom):
                    base = n.module or ""
                    if n.level:
                        up = package.split(".")[: len(package.split(".")) - (n.level - 1)]
                        base = ".".join([*up, *([base] if base else [])])
                    found.add(base)
                    found.update(f"{base}.{a.name}" for a in n.names)
                elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                    break
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def test_no_import_circle_in_the_package():
    graph = _module_imports(ROOT / "kernelladder")
    assert "kernelladder.engine.record.gains" in graph["kernelladder.engine.record.state"]
    circles = []
    for start in sorted(graph):
        seen, stack = set(), [(start, (start,))]
        while stack:
            name, path = stack.pop()
            for dep in sorted(graph[name]):
                if dep == start:
                    circles.append(" -> ".join((*path, dep)))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, (*path, dep)))
    assert not circles, circles[:3]


def _imports_anywhere(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function (made on use)."""
    import ast

    found: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            found.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            found.add(n.module)
            found.update(f"{n.module}.{a.name}" for a in n.names)
    return found


@pytest.mark.parametrize(
    "side, never",
    [
        ("worker", ("host",)),  # the sandboxed worker runs none of the caller's code
        ("host", ("worker",)),  # the caller starts workers; it never runs their code itself
        ("contract", ("host", "worker")),
    ],
)
def test_the_verifiers_processes_share_only_the_contract(side, never):
    folder = ROOT / "kernelladder" / "verifier" / side
    files = sorted(folder.rglob("*.py"))
    assert len(files) > 1
    bad = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _imports_anywhere(path)
        for other in never
        if name == f"kernelladder.verifier.{other}"
        or name.startswith(f"kernelladder.verifier.{other}.")
    }
    assert not bad, sorted(bad)[:5]


def _engine_imports(path: Path) -> set[str]:
    """What a file imports of the engine: `kernelladder.engine` itself, or the name of a
    module behind it (`kernelladder.engine.record.log`), at module level or on use."""
    import ast

    found: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            names = [n.module]
        found.update(m for m in names if m.split(".")[:2] == ["kernelladder", "engine"])
    return found


def test_code_outside_the_engine_comes_in_by_its_door():
    """The app, the CLI, deploy, ops and the verifier import `kernelladder.engine` and
    nothing behind it: what the engine keeps where (record/, run/, runners/, proposers/)
    is its own to move."""
    package = ROOT / "kernelladder"
    files = [
        p for p in sorted(package.rglob("*.py")) if "engine" not in p.relative_to(package).parts[:1]
    ]
    assert len(files) > 50
    bad = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _engine_imports(path)
        if name != "kernelladder.engine"
    )
    assert not bad, bad[:10]


def test_the_door_serves_every_name_it_lists():
    code = (
        "import kernelladder.engine as e\n"
        "missing = [n for n in e.__all__ if getattr(e, n, None) is None]\n"
        "print(missing)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
