"""The reference's own entry points watched while a candidate's call runs: a candidate
that calls the reference (a KernelBench problem's Model.forward, a workspace's reference
or original kernel) instead of computing in Triton breaks the fence."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kernelladder.ops.spec import OpSpec


@contextlib.contextmanager
def _workspace_tripwire(spec: OpSpec, hits: list[str]) -> Iterator[None]:
    """A workspace's reference (reference.py, or the user's original kernel when there
    is none) called during the candidate's call is a fence violation."""
    patched: list[tuple[Any, str, Any]] = []
    for module in spec.reference_modules():  # type: ignore[attr-defined]
        for attr in ("reference", "kernel"):
            original = module.__dict__.get(attr)
            if callable(original) and not isinstance(original, type):

                def tripped(*args: Any, _o: Any = original, _n: str = attr, **kw: Any) -> Any:
                    hits.append(f"the reference's {_n}(...)")
                    return _o(*args, **kw)

                patched.append((module, attr, original))
                setattr(module, attr, tripped)
        for cls_name in ("Model", "ModelNew"):
            cls = module.__dict__.get(cls_name)
            forward = vars(cls).get("forward") if isinstance(cls, type) else None
            if forward is not None:

                def tripped_forward(
                    *args: Any, _o: Any = forward, _n: str = cls_name, **kw: Any
                ) -> Any:
                    hits.append(f"the reference's {_n}.forward")
                    return _o(*args, **kw)

                patched.append((cls, "forward", forward))
                cls.forward = tripped_forward
    try:
        yield
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)


@contextlib.contextmanager
def reference_tripwire(spec: OpSpec) -> Iterator[list[str]]:
    """The names of the reference's entry points called during the candidate's call
    (filled as they are called): the problem's Model.forward (KernelBench), a workspace's
    reference; any is a fence violation."""
    hits: list[str] = []
    if spec.kind == "workspace":
        with _workspace_tripwire(spec, hits):
            yield hits
        return
    model_cls = getattr(getattr(spec, "module", None), "Model", None)
    original = vars(model_cls).get("forward") if isinstance(model_cls, type) else None
    if spec.kind != "kernelbench" or original is None:
        yield hits
        return

    def forward(*args: Any, **kwargs: Any) -> Any:
        hits.append("Model.forward")
        return original(*args, **kwargs)

    model_cls.forward = forward
    try:
        yield hits
    finally:
        model_cls.forward = original
