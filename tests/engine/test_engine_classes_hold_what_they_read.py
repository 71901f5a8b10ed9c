"""Every class of the engine reads only attributes that it, or a base class, defines or
sets: a part of the run is a collaborator handed what it reads (GateKeeper's pattern),
never a mixin that reads its host's attributes."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap

import kernelladder.engine as engine


def _names(cls: type) -> tuple[set[str], set[str]]:
    """(what cls's own source defines or sets on self, what it reads from self)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(tree, ast.ClassDef)
    held: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            held.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:  # `A = ...` and `A, B = ...` alike
                names = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
                held |= {n.id for n in names if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            held.add(node.target.id)
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self":
            (held if isinstance(node.ctx, ast.Store) else read).add(node.attr)
    return held, read


def _engine_classes() -> list[type]:
    classes = []
    for info in pkgutil.walk_packages(engine.__path__, engine.__name__ + "."):
        module = importlib.import_module(info.name)
        classes += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__
        ]
    return classes


def test_no_engine_class_reads_an_attribute_it_does_not_hold():
    classes = _engine_classes()
    assert any(cls.__name__ == "Run" for cls in classes)
    unheld = {}
    for cls in classes:
        held: set[str] = set()
        for base in cls.__mro__:
            if base.__module__.startswith("kernelladder."):
                held |= _names(base)[0]
                if dataclasses.is_dataclass(base):  # fields declared elsewhere (RunOptions')
                    held |= {f.name for f in dataclasses.fields(base)}
            else:  # object, Exception, typing's and asyncio's bases
                held |= set(dir(base))
        missing = sorted(_names(cls)[1] - held)
        if missing:
            unheld[f"{cls.__module__}.{cls.__qualname__}"] = missing
    assert unheld == {}
