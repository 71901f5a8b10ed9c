"""The selected attempt's verdict: gate by gate with evidence, then the feedback the
proposer was given (EXPECTED / SAW / FENCE / DEAD ENDS) and the timings."""

from __future__ import annotations

import json

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.verifier.verdict import FAIL, GATES, PASS, Verdict

GATE_MARKS = {PASS: ("✓", "$success"), FAIL: ("✗", "bold $error")}
EVIDENCE_CHARS = 160
_VERSUS = {"faster": "$success", "tie": "$warning", "slower": "$error"}


class VerdictView(VerticalScroll):
    DEFAULT_CSS = """
    VerdictView {
        background: $surface;
        padding: 0 1;
    }
    VerdictView > Static {
        width: 1fr;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple | None = None

    def compose(self):
        yield Static("no attempt selected", id="verdict-body")

    def show(self, attempt: v.AttemptView | None, verdict: Verdict | None) -> None:
        key = (attempt, verdict is not None)
        if key == self._key:
            return
        self._key = key
        self.query_one("#verdict-body", Static).update(render_verdict(attempt, verdict))


def render_verdict(attempt: v.AttemptView | None, verdict: Verdict | None) -> Content:
    if attempt is None:
        return Content("no attempt selected")
    lines: list[Content] = [
        Content.assemble(
            (f"#{attempt.number}", "bold"),
            f"  branch {attempt.branch_id}  ",
            (attempt.strategy, "$primary"),
            f"  parent {'#' + str(attempt.parent) if attempt.parent is not None else 'start'}",
        ),
        Content.assemble(
            ("move ", "$text-muted"),
            attempt.move or "—",
            ("   undo ", "$text-muted"),
            (attempt.undo_cost or "—", _undo_style(attempt.undo_cost)),
            f": {attempt.undo_reason}" if attempt.undo_reason else "",
        ),
        Content(""),
    ]
    if verdict is None:
        if attempt.state == v.ATTEMPT_JUDGED:
            lines.append(Content.assemble(("verdict ", "bold"), attempt.summary))
            lines.append(Content.styled("(full verdict file not available)", "$text-muted"))
        else:
            lines.append(Content.styled(f"not judged yet: {attempt.state}", "$text-muted"))
        return Content("\n").join(lines)
    kind_style = "bold $success" if verdict.passed else "bold $error"
    lines.append(
        Content.assemble(
            ("verdict ", "bold"),
            (verdict.kind, kind_style),
            f" at gate {verdict.gate}" if verdict.gate else "",
            f"   on {verdict.device}",
            f"   {verdict.elapsed_s:.1f}s",
        )
    )
    order = [g for g in GATES if g in verdict.gates] + [g for g in verdict.gates if g not in GATES]
    for name in order:
        gate = verdict.gates[name]
        mark, style = GATE_MARKS.get(gate.status, ("-", "$text-muted"))
        lines.append(
            Content.assemble(
                (f"  {mark} ", style),
                (f"{name:<12}", "bold" if gate.status == FAIL else ""),
                (gate.status if gate.status not in (PASS, FAIL) else "", "$text-muted"),
                " " if gate.status not in (PASS, FAIL) else "",
                gate.detail,
            )
        )
        if gate.evidence:
            lines.append(Content.styled(f"      {_evidence(gate.evidence)}", "$text-muted"))
    fb = verdict.feedback
    lines.append(Content(""))
    for label, text in (("EXPECTED", fb.expected), ("SAW", fb.saw), ("FENCE", fb.fence)):
        lines.append(_labelled(label, text or "—"))
    dead_ends = "\n".join(f"- {d}" for d in fb.dead_ends) if fb.dead_ends else "none"
    lines.append(_labelled("DEAD ENDS", dead_ends))
    lines.append(Content(""))
    lines.extend(_speed_lines(verdict))
    if verdict.flags:
        lines.append(Content.assemble(("flags ", "bold $warning"), ", ".join(verdict.flags)))
    return Content("\n").join(lines)


def _labelled(label: str, text: str) -> Content:
    pad = " " * 11
    body = text.replace("\n", "\n" + pad)
    return Content.assemble((f"{label:<10} ", "bold $accent"), body)


def _speed_lines(verdict: Verdict) -> list[Content]:
    if verdict.speedup is None:
        skipped = verdict.gates.get("speed")
        why = skipped.detail if skipped is not None and skipped.detail else "no timings"
        return [Content.assemble(("speed ", "bold"), ("not measured", "$warning"), f": {why}")]
    lines = [
        Content.assemble(
            ("speed ", "bold"),
            (fmt.speedup(verdict.speedup), "bold $success"),
            " vs reference",
            *(f"   {fmt.speedup(x)} vs {name}" for name, x in verdict.speedup_vs.items()),
            f"   floor {fmt.percent(verdict.floor_fraction)}",
            f"   noise {fmt.percent(verdict.noise)}",
        )
    ]
    if verdict.timings:
        lines.append(
            Content.styled(
                f"  {'shape':<24} {'ref ms':>9} {'cand ms':>9} {'speedup':>8} {'floor':>6} "
                f"{'noise':>6}  vs fastest baseline",
                "$text-muted",
            )
        )
        for t in verdict.timings:
            versus = fmt.versus_timing(t)
            lines.append(
                Content.assemble(
                    f"  {t.label[:24]:<24} {_ms(t.reference_ms):>9} {_ms(t.candidate_ms):>9} "
                    f"{fmt.speedup(t.speedup):>8} {fmt.percent(t.floor_fraction):>6} "
                    f"{fmt.percent(t.noise):>6}  ",
                    (
                        (f"{fmt.speedup(versus[1])} {versus[2]} ({versus[3]})", _VERSUS[versus[2]])
                        if versus
                        else ("—", "$text-muted")
                    ),
                )
            )
    return lines


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def _evidence(evidence: dict) -> str:
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in evidence.items())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def _undo_style(cost: str) -> str:
    return {"high": "bold $error", "medium": "$warning", "low": "$success"}.get(cost, "")
