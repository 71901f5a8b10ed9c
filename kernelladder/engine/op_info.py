"""What the engine needs of an op (OpInfo), loaded once from a built-in op, a workspace
or a KernelBench problem and saved in meta.json so a resume needs neither."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Load a built-in op, a workspace directory or a KernelBench problem file; `start`:
    a file with the user's own starting kernel. OpLoadError (one line) if not."""
    from kernelladder.ops.registry import load_op, op_to_wire
    from kernelladder.ops.spec import OpLoadError

    spec = load_op(op)
    source, label = "", ""
    if spec.starting_candidate:
        source = Path(spec.starting_candidate).read_text(encoding="utf-8")
    if spec.kind == "workspace":
        source, label = spec.files.kernel, f"your kernel ({spec.name}/kernel.py)"  # type: ignore[attr-defined]
    if start:
        try:
            source = Path(start).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OpLoadError(f"--start {start}: cannot read it: {exc}") from None
        label = f"your kernel ({Path(start).name})"
    description = spec.describe()
    note = str(description.get("reference_note") or "")
    if spec.kind == "workspace":  # DIR/knowledge/ for the api/code prompts, within a budget
        from kernelladder.ops.workspace import knowledge_text

        text, files = knowledge_text(op)
        if files:
            description = {**description, "knowledge": text, "knowledge_files": files}
    return OpInfo(spec.name, spec.kind, op_to_wire(spec), description, source, label, note)
