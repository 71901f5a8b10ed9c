"""The prompt the model proposers (api, code) send: the op, the parent and its verdict,
the verifier's feedback (EXPECTED / SAW / FENCE / DEAD ENDS), the hints and the branch's
history, and the reply format (one ```python file, a MOVE: line, an UNDO: line)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelladder.engine.proposers.extract import arg_names, is_kernelbench
from kernelladder.engine.protocols import ProposalContext

MAX_SOURCE_CHARS = 40_000  # a runaway parent would crowd out everything else

SYSTEM = """You are an expert GPU kernel engineer. You write Triton kernels that are \
correct first and then as fast as the hardware allows. Each reply is one candidate: a \
complete, self-contained Python file. A fixed verifier runs it on fresh random inputs \
(including hard cases) against a high-precision reference, checks that it launches \
Triton kernels and calls no library implementation of the op, that it is deterministic \
and honest, and then times it on the GPU shape suite. Keep every rule of the FENCE."""

REPLY_FORMAT = """Reply with exactly one complete Python file in a single ```python code \
block (it must import triton and define {entry}), then two lines after the block:
MOVE: <one line: what changed against the parent, e.g. "rows per program 1->4, num_warps 8">
UNDO: <low|medium|high> <one line reason>
(low: a parameter change of a verified parent; medium: a structural rewrite within the \
same approach; high: a different algorithm, abandoning the best lineage, or anything \
touching the fence)."""


def build_prompt(ctx: ProposalContext) -> tuple[str, str]:
    """(system, user) text for one proposal."""
    op = ctx.op
    sections: list[str] = [_op_section(op, ctx.device)]
    sections.append(
        f"# BRANCH\nStrategy of this branch: {ctx.strategy}" + _strategy_note(op, ctx.strategy)
    )
    parent_name = (
        f"attempt #{ctx.parent_attempt}"
        if ctx.parent_attempt is not None
        else "the starting candidate"
    )
    sections.append(f"# PARENT ({parent_name})\n```python\n{_clip(ctx.parent_source)}```")
    if ctx.parent_verdict:
        sections.append("# VERDICT OF THE PARENT\n" + verdict_text(ctx.parent_verdict))
    sections.append(_feedback_section(ctx))
    if ctx.history:
        sections.append("# BRANCH HISTORY (oldest first)\n" + history_text(ctx.history))
    if ctx.hardware:
        sections.append(
            "# HARDWARE (where the verifier times candidates)\n" + hardware_text(ctx.hardware)
        )
    if ctx.profile:
        sections.append(
            "# PROFILE OF THE PARENT (Nsight Compute, largest shape)\n" + profile_text(ctx.profile)
        )
    knowledge = str(op.get("knowledge") or "").strip()
    if knowledge:
        sections.append("# KNOWLEDGE (the person's notes for this kernel)\n" + knowledge)
    search_knowledge = _search_knowledge(op)
    if search_knowledge:
        sections.append("# KNOWLEDGE (what the built-in search knows)\n" + search_knowledge)
    if ctx.hints.strip():
        sections.append("# HINTS FROM THE PERSON STEERING THE RUN\n" + ctx.hints.strip())
    if ctx.best_source and ctx.best_source.strip() != (ctx.parent_source or "").strip():
        sections.append(
            f"# BEST CANDIDATE OF THE RUN SO FAR\n```python\n{_clip(ctx.best_source)}```"
        )
    entry = (
        "class ModelNew (same init arguments as Model)"
        if is_kernelbench(op)
        else (f"kernel({', '.join(arg_names(op))})")
    )
    sections.append(
        "# TASK\nWrite the next candidate for this branch: improve on the parent following "
        "the branch's strategy, fix what the verifier reported, avoid the dead ends.\n"
        + REPLY_FORMAT.format(entry=entry)
    )
    return SYSTEM, "\n\n".join(sections) + "\n"


def _clip(source: str | None) -> str:
    text = (source or "").rstrip("\n") + "\n"
    if len(text) > MAX_SOURCE_CHARS:
        text = text[:MAX_SOURCE_CHARS] + "\n# ... (truncated)\n"
    return text


def _op_section(op: Mapping[str, Any], device: str) -> str:
    lines = [f"# OP: {op.get('name')}"]
    if op.get("summary"):
        lines.append(str(op["summary"]))
    if op.get("signature"):
        lines.append(f"Signature: {op['signature']}")
    on_gpu = str(device).startswith("cuda")
    shapes = op.get("gpu_shapes" if on_gpu else "cpu_shapes") or []
    if shapes:
        lines.append(f"Shape suite ({'GPU' if on_gpu else 'CPU, Triton interpreter'}):")
        for s in shapes:
            if isinstance(s, Mapping):
                dims = ", ".join(f"{k}={v}" for k, v in (s.get("dims") or {}).items())
                lines.append(f"  - {s.get('label')}: {dims} {s.get('dtype', '')}".rstrip())
    if not on_gpu:
        lines.append("No GPU here: speed is not measured, only correctness and honesty.")
    return "\n".join(lines)


def _search_knowledge(op: Mapping[str, Any]) -> str:
    """The built-in op's template notes (ops/family.py: knowledge), else ""."""
    if op.get("kind") != "builtin":  # a workspace may share a built-in op's name
        return ""
    try:
        from kernelladder.ops.registry import knowledge

        return knowledge(str(op.get("name")))
    except Exception:  # the notes are optional; a broken template must not block a proposal
        return ""


def _strategy_note(op: Mapping[str, Any], strategy: str) -> str:
    """The search family of the same name, if any, as a hint of what the label means."""
    if is_kernelbench(op):
        return ""
    try:
        from kernelladder.ops.registry import catalog

        families = catalog().get(str(op.get("name")), ())
    except Exception:  # the note is optional; a broken template must not block a proposal
        return ""
    base = strategy.split("#", 1)[0]
    for f in families:
        if f.name == base:
            return f" ({f.summary})"
    return ""


def _feedback_section(ctx: ProposalContext) -> str:
    fb = ctx.feedback or {}
    dead = list(ctx.dead_ends) or list(fb.get("dead_ends") or ())
    fence = fb.get("fence") or ctx.op.get("fence") or ""
    lines = ["# FEEDBACK ON THE LATEST ATTEMPT"]
    lines.append(f"EXPECTED: {fb.get('expected') or '(nothing reported)'}")
    lines.append(f"SAW: {fb.get('saw') or '(nothing reported)'}")
    lines.append(f"FENCE:\n{fence}" if fence else "FENCE: (none given)")
    vetoed = list(ctx.vetoed_families)
    if dead or vetoed:
        lines.append("DEAD ENDS (tried on this branch and failed or vetoed; do not repeat):")
        lines += [f"  - {d}" for d in dead]
        lines += [
            f"  - family {f}: a change to it was vetoed; do not propose this family again"
            for f in vetoed
        ]
    else:
        lines.append("DEAD ENDS: none yet")
    return "\n".join(lines)


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "n/a"


def verdict_text(verdict: Mapping[str, Any]) -> str:
    lines = [
        f"verdict: {verdict.get('verdict')}"
        + (f", first failing gate: {verdict.get('gate')}" if verdict.get("gate") else "")
    ]
    gates = verdict.get("gates") or {}
    for name, gate in gates.items():
        if isinstance(gate, Mapping) and gate.get("status") == "fail":
            lines.append(f"  {name}: {gate.get('detail', '')}")
    if verdict.get("speedup") is not None:
        lines.append(
            f"speedup over the reference (geomean): {_num(verdict.get('speedup'), '.3f')}x; "
            f"floor fraction on the largest shape: {_num(verdict.get('floor_fraction'), '.3f')}"
        )
    for name, value in (verdict.get("speedup_vs") or {}).items():
        lines.append(f"  vs {name}: {_num(value, '.3f')}x")
    for t in verdict.get("timings") or ():
        if not isinstance(t, Mapping):
            continue
        baselines = ", ".join(
            f"{k} {_num(v, '.4f')} ms" for k, v in (t.get("baselines_ms") or {}).items()
        )
        lines.append(
            f"  {t.get('label')}: candidate {_num(t.get('candidate_ms'), '.4f')} ms, reference "
            f"{_num(t.get('reference_ms'), '.4f')} ms, floor fraction "
            f"{_num(t.get('floor_fraction'), '.3f')}" + (f"; {baselines}" if baselines else "")
        )
    return "\n".join(lines)


def history_text(history: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for h in history:
        if not isinstance(h, Mapping):
            continue
        verdict = h.get("verdict")
        if isinstance(verdict, Mapping):
            verdict = verdict.get("verdict")
        outcome = verdict or h.get("status") or "not judged"
        if h.get("gate"):
            outcome += f" at {h['gate']}"
        if h.get("vs_best") is not None:  # the figure of merit first, the reference second
            outcome += f", {_num(h['vs_best'], '.3f')}x vs the fastest baseline"
            if h.get("standing"):
                outcome += f" ({h['standing']})"
            if h.get("speedup") is not None:
                outcome += f", {_num(h['speedup'], '.3f')}x over the reference"
        elif h.get("speedup") is not None:
            outcome += f", {_num(h['speedup'], '.3f')}x"
        lines.append(f"  #{h.get('attempt')}: {h.get('move') or '(no move)'} -> {outcome}")
    return "\n".join(lines) or "  (none)"


def hardware_text(hw: Mapping[str, Any]) -> str:
    """GPU, compute capability, SMs, the measured copy bandwidth and matmul rates, and
    the versions the candidate is compiled and run with."""
    lines = []
    if hw.get("gpu"):
        cc = f", compute capability {hw['cc']}" if hw.get("cc") else ""
        sms = f", {hw['sms']} SMs" if hw.get("sms") else ""
        lines.append(f"GPU: {hw['gpu']}{cc}{sms}")
    rates = hw.get("rates") or {}
    if isinstance(rates, Mapping) and rates:
        parts = []
        for unit, rate in rates.items():
            if not isinstance(rate, (int, float)):
                continue
            if unit == "copy":  # bytes per ms
                parts.append(f"copy bandwidth {rate / 1e9:.2f} TB/s (read + write)")
            else:  # operations per ms
                per_s = "TOP/s" if unit.startswith("int8") else "TFLOP/s"
                parts.append(f"{unit} matmul {rate / 1e9:.0f} {per_s}")
        if parts:
            lines.append("measured: " + "; ".join(parts))
    versions = ", ".join(f"{k} {hw[k]}" for k in ("triton", "torch", "cuda") if hw.get(k))
    if versions:
        lines.append(f"versions: {versions}")
    return "\n".join(lines) or "(unknown)"


def profile_text(profile: Mapping[str, Any]) -> str:
    from kernelladder.verifier.host.profile import ProfileSummary

    try:
        return "\n".join(ProfileSummary.from_dict(profile).lines())
    except (TypeError, ValueError):
        return "(the profile could not be read)"
