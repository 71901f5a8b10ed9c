"""The selected attempt's verdict: gate by gate with evidence, then the feedback the
proposer was given (EXPECTED / SAW / FENCE / DEAD ENDS) and the timings."""

from __future__ import annotations

import json

from textual.containers import HorizontalScroll, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kernelladder.app import format as fmt
from kernelladder.app import view as v
from kernelladder.app.verdict_report import stages_text
from kernelladder.engine import (
    AttemptStatus,
    best_baseline_name,
    ranking_noise,
    standing_counts,
    standing_shapes,
)
from kernelladder.verifier.contract.verdict import (
    FAIL,
    GATES,
    PASS,
    Verdict,
    early_stop_text,
    vs_best,
)


def _pct1(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


GATE_MARKS = {PASS: ("✓", "$success"), FAIL: ("✗", "bold $error")}
EVIDENCE_CHARS = 160
_VERSUS = {"faster": "$success", "tie": "$warning", "slower": "$error"}


class VerdictView(VerticalScroll):
    """The verdict's prose wraps to the width; the speed block (a table, one row per
    shape) never wraps and scrolls sideways when it is wider than the panel: a wrapped
    row put "rounds)" under the shape column, even at 200 columns."""

    DEFAULT_CSS = """
    VerdictView {
        background: $surface;
        padding: 0 1;
    }
    VerdictView > Static {
        width: 1fr;
    }
    VerdictView > HorizontalScroll {
        height: auto;
        scrollbar-size-horizontal: 1;
    }
    VerdictView > HorizontalScroll > Static {
        width: auto;
        text-wrap: nowrap;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple | None = None
        self._verdict: Verdict | None = None
        self._speed_for: tuple | None = None  # (verdict, width) the speed block shows

    def compose(self):
        yield Static("no attempt selected", id="verdict-body")
        with HorizontalScroll(id="verdict-speed-scroll"):
            yield Static("", id="verdict-speed")

    def show(self, attempt: v.AttemptView | None, verdict: Verdict | None) -> None:
        key = (attempt, verdict is not None)
        if key == self._key:
            return
        self._key = key
        self._verdict = verdict if attempt is not None else None
        self.query_one("#verdict-body", Static).update(render_verdict(attempt, verdict))
        self._show_speed()

    def on_resize(self) -> None:
        self._show_speed()

    def _show_speed(self) -> None:
        width = self.scrollable_content_region.width or None
        if (self._verdict, width) == self._speed_for:
            return
        self._speed_for = (self._verdict, width)
        speed = render_speed(self._verdict, width)
        self.query_one("#verdict-speed-scroll").display = speed is not None
        self.query_one("#verdict-speed", Static).update(speed or "")


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
        if attempt.state == AttemptStatus.JUDGED:
            lines.append(Content.assemble(("verdict ", "bold"), attempt.summary))
            lines.append(Content.styled("(full verdict file not available)", "$text-muted"))
        elif attempt.state == AttemptStatus.VETOED:  # never verified, and never will be
            lines.append(Content.assemble(("vetoed", "bold $warning"), " at ",
                                          attempt.vetoed or "its gate"))  # fmt: skip
            lines.append(Content.styled("never verified: the move is a dead end of its branch",
                                        "$text-muted"))  # fmt: skip
        else:
            lines.append(Content.styled(f"not judged yet: {attempt.state}", "$text-muted"))
        return Content("\n").join(lines)
    lines.extend(standing_block(verdict))
    if verdict.early_stop:  # coarse times: say so before any figure is read as final
        lines.append(Content.styled(early_stop_text(verdict.early_stop), "bold $warning"))
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
    if verdict.stages:
        lines.append(Content.styled(f"  stages: {stages_text(verdict.stages)}", "$text-muted"))
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
    if verdict.speedup is None:  # one line that says why: it wraps with the prose
        lines.append(Content(""))
        lines.extend(_speed_lines(verdict))
    if verdict.flags:
        lines.append(Content.assemble(("flags ", "bold $warning"), ", ".join(verdict.flags)))
    return Content("\n").join(lines)


def standing_block(verdict: Verdict) -> list[Content]:
    """What the verdict tab leads with: vs best (geomean over the fastest library baseline
    per shape), the standing counts, the floor and, second, the speedup over the
    reference; then a row per shape against its fastest baseline. [] when speed was not
    measured or no baseline ran."""
    if not verdict.passed or verdict.speedup is None:
        return []
    shapes = standing_shapes(verdict.timings)
    geomean = vs_best(verdict.timings)
    if not shapes or geomean is None:
        return []
    versus = best_baseline_name(shapes) or "best"
    head = Content.assemble(
        ("vs best ", "bold"),
        (f"{geomean:.2f}× vs {versus}", "bold $success" if geomean >= 1 else "bold $warning"),
        " (geomean)",
        f" · {standing_counts(shapes)}",
        f" · {fmt.percent(verdict.floor_fraction)} floor",
        (f" · {fmt.speedup(verdict.speedup)} over reference", "$text-muted"),
        (
            f" · noise of the geomean {_pct1(ranking_noise(shapes, verdict.noise))}",
            "$text-muted",
        ),
    )
    width = max(len("shape"), *(len(label) for label in shapes))
    lines = [
        head,
        Content.styled(
            f"  {'shape':<{width}} {'vs best':>8}  {'standing':<8} {'won':>6} "
            f"{'cand ms':>9} {'best ms':>9}  baseline",
            "$text-muted",
        ),
    ]
    by_label = {t.label: t for t in verdict.timings}
    for label, row in shapes.items():
        t = by_label[label]
        paired = t.paired if t.paired and t.paired.get("baseline") == row["baseline"] else None
        rounds = f"{row['won']}/{row['rounds']}" if "rounds" in row else "—"
        base_ms = paired.get("baseline_ms") if paired else t.baselines_ms.get(row["baseline"])
        cand_ms = paired.get("candidate_ms") if paired else t.candidate_ms
        lines.append(
            Content.assemble(
                f"  {label:<{width}} {fmt.speedup(row['vs_best']):>8}  ",
                (f"{row['standing']:<8}", _VERSUS[row["standing"]]),
                f" {rounds:>6} {_ms(cand_ms):>9} {_ms(base_ms):>9}  {row['baseline']}",
            )
        )
    lines.append(Content(""))
    return lines


def render_speed(verdict: Verdict | None, width: int | None = None) -> Content | None:
    """The speed block under the verdict: the speedups, then a row per shape (None when
    speed was not measured or there is no verdict file to read it from). Narrower than
    a row, each shape's standing against the fastest baseline goes on a line of its own."""
    if verdict is None or verdict.speedup is None:
        return None
    return Content("\n").join([Content(""), *_speed_lines(verdict, width)])


def _labelled(label: str, text: str) -> Content:
    pad = " " * 11
    body = text.replace("\n", "\n" + pad)
    return Content.assemble((f"{label:<10} ", "bold $accent"), body)


def _speed_lines(verdict: Verdict, width: int | None = None) -> list[Content]:
    if verdict.speedup is None:
        skipped = verdict.gates.get("speed")
        why = skipped.detail if skipped is not None and skipped.detail else "no timings"
        return [Content.assemble(("speed ", "bold"), ("not measured", "$warning"), f": {why}")]
    against = [f"{fmt.speedup(x)} vs {name}" for name, x in verdict.speedup_vs.items()]
    headline = [
        ("speed ", "bold"),
        (fmt.speedup(verdict.speedup), "bold $success"),
        " over reference",
        f"   floor {fmt.percent(verdict.floor_fraction)}",
        f"   noise {fmt.percent(verdict.noise)}",
    ]
    one_line = Content.assemble(*headline[:3], *(f"   {a}" for a in against), *headline[3:])
    if width is None or one_line.cell_length <= width:
        lines = [one_line]
    else:  # the speedups against each library baseline under the headline
        lines = [Content.assemble(*headline), *(Content(f"      {a}") for a in against)]
    if not verdict.timings:
        return lines
    label_width = max(len("shape"), *(len(t.label) for t in verdict.timings))
    rows = []
    for t in verdict.timings:
        versus = fmt.versus_timing(t)
        numbers = (
            f"  {t.label:<{label_width}} {_ms(t.reference_ms):>9} {_ms(t.candidate_ms):>9} "
            f"{fmt.speedup(t.speedup):>8} {fmt.percent(t.floor_fraction):>6} "
            f"{fmt.percent(t.noise):>6}"
        )
        standing = (
            Content.styled(
                f"{fmt.speedup(versus[1])} {versus[2]} ({versus[3]})", _VERSUS[versus[2]]
            )
            if versus
            else Content.styled("—", "$text-muted")
        )
        rows.append((numbers, standing))
    columns = (
        f"  {'shape':<{label_width}} {'ref ms':>9} {'cand ms':>9} {'speedup':>8} {'floor':>6} "
        f"{'noise':>6}"
    )
    widest = max(len(numbers) + 2 + standing.cell_length for numbers, standing in rows)
    if width is None or widest <= width:
        lines.append(Content.styled(f"{columns}  vs fastest baseline", "$text-muted"))
        lines.extend(Content.assemble(numbers, "  ", standing) for numbers, standing in rows)
    else:  # too narrow for one row a shape: the standing under its shape
        lines.append(Content.styled(f"{columns}\n    ↳ vs fastest baseline", "$text-muted"))
        for numbers, standing in rows:
            lines += [Content(numbers), Content.assemble("    ↳ ", standing)]
    return lines


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def _evidence(evidence: dict) -> str:
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in evidence.items())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def _undo_style(cost: str) -> str:
    return {"high": "bold $error", "medium": "$warning", "low": "$success"}.get(cost, "")
