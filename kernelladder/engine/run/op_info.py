"""What the engine needs of an op (OpInfo), loaded once from a built-in op, a workspace
or a KernelBench problem and saved in meta.json so a resume needs neither.

A built-in op's OpInfo is the same for every run of one checkout: it is kept on disk
(op_info.json in the cache directory, calibration.cache_file's), keyed by a digest of
the ops package's files, so a run of a built-in op starts without importing torch (the
workers import it; the CLI's own import cost seconds before the first attempt). Any
change to those files, or another schema, is a miss: every built-in op is loaded again
and the file rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelladder.ops.folders import OPS_DIR
from kernelladder.ops.registry import BUILTIN_OPS

START_ATTEMPT = 0  # the number of the user's own kernel, verified before any proposal


@dataclass(frozen=True)
class OpInfo:
    """What the engine needs of an op, saved in meta.json so a resume needs no problem
    file and no torch."""

    name: str
    kind: str  # "builtin" | "kernelbench"
    wire: Any  # VerifyRequest.op
    description: dict[str, Any]  # OpSpec.describe()
    starting_source: str  # the starting candidate ("" when the op has none)
    # set when the start is the user's own kernel (a workspace, or --start FILE): it is
    # verified first, as attempt #0, and every branch starts from it
    start_label: str = ""
    reference_note: str = ""  # e.g. "the reference is your original kernel (no reference.py)"

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "kind": self.kind,
            "wire": self.wire,
            "description": self.description,
            "starting_source": self.starting_source,
        }
        if self.start_label:
            d["start_label"] = self.start_label
        if self.reference_note:
            d["reference_note"] = self.reference_note
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpInfo:
        return cls(
            d["name"], d["kind"], d["wire"], dict(d["description"]), d["starting_source"],
            str(d.get("start_label") or ""), str(d.get("reference_note") or ""),
        )  # fmt: skip


def load_op_info(op: str, start: str | None = None) -> OpInfo:
    """Load a built-in op (from the disk cache when it holds this checkout's), a
    workspace directory or a KernelBench problem file; `start`: a file with the user's
    own starting kernel. OpLoadError (one line) if not."""
    digest = ops_digest() if op in BUILTIN_OPS else None
    info = cached_builtin(op, digest) if digest else None
    if info is None:
        info = _load(op)
        if digest:
            _keep_builtins(info, digest)
    if start:
        info = replace(info, starting_source=_read_start(start), start_label=f"your kernel ({Path(start).name})")  # fmt: skip
    return info


def _read_start(start: str) -> str:
    try:
        return Path(start).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        from kernelladder.ops.spec import OpLoadError

        raise OpLoadError(f"--start {start}: cannot read it: {exc}") from None


def _load(op: str) -> OpInfo:
    from kernelladder.ops.registry import load_op, op_to_wire

    spec = load_op(op)
    source, label = "", ""
    if spec.starting_candidate:
        source = Path(spec.starting_candidate).read_text(encoding="utf-8")
    if spec.kind == "workspace":
        source, label = spec.files.kernel, f"your kernel ({spec.name}/kernel.py)"  # type: ignore[attr-defined]
    description = spec.describe()
    note = str(description.get("reference_note") or "")
    if spec.kind == "workspace":  # DIR/knowledge/ for the api/code prompts, within a budget
        from kernelladder.ops.workspace_files import knowledge_text

        text, files = knowledge_text(op)
        if files:
            description = {**description, "knowledge": text, "knowledge_files": files}
    return OpInfo(spec.name, spec.kind, op_to_wire(spec), description, source, label, note)


# --- the built-in ops' OpInfo kept on disk ------------------------------------------------
CACHE_SCHEMA = 1
CACHE_NAME = "op_info.json"


def ops_digest(root: Path = OPS_DIR) -> str:
    """A digest of every file of the ops package (the specs and starting kernels an
    OpInfo is made of): what a kept OpInfo is valid for."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_path() -> Path:
    from kernelladder.verifier.host.calibration import cache_file

    return cache_file().with_name(CACHE_NAME)


def cached_builtin(name: str, digest: str | None = None) -> OpInfo | None:
    """The kept OpInfo of built-in op `name`, None when there is none for this
    checkout's ops (`digest`, ops_digest() when not given: another digest, another
    schema, an unreadable file)."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        if data.get("schema_version") != CACHE_SCHEMA:
            return None
        if data.get("ops_digest") != (digest or ops_digest()):
            return None
        return OpInfo.from_dict(data["ops"][name])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _keep_builtins(loaded: OpInfo, digest: str) -> None:
    """Every built-in op's OpInfo kept for this checkout (torch is imported by now, so
    loading the others costs little); a file that cannot be written is left alone."""
    from kernelladder.verifier.host.calibration import write_cache_file

    infos = {loaded.name: loaded.to_dict()}
    with contextlib.suppress(Exception):
        for name in BUILTIN_OPS:
            if name not in infos:
                infos[name] = _load(name).to_dict()
    text = json.dumps({"schema_version": CACHE_SCHEMA, "ops_digest": digest, "ops": infos})
    write_cache_file(cache_path(), text)
