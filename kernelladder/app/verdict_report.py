"""The readable verdict report `kernelladder check` prints (rich; never textual)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kernelladder.app.format import versus_timing
from kernelladder.engine import (
    best_baseline_name,
    merit_from_timings,
    standing_counts,
    standing_shapes,
)
from kernelladder.verifier.contract.verdict import (
    BEATS_EVERY_BASELINE,
    FAIL,
    PASS,
    VERSUS_WORDS,
    Verdict,
    early_stop_text,
    standing,
    standing_text,
)

_STATUS_STYLE = {PASS: "bold green", FAIL: "bold red", "skipped": "dim"}
_VERSUS_STYLE = {"faster": "green", "tie": "yellow", "slower": "red"}


def _versus_text(versus: tuple[str, float, str, str]) -> str:
    """versus_timing's answer as text: "1.00x tie (torch.compile, 2/7 rounds)"."""
    return f"{versus[1]:.2f}x {versus[2]} ({versus[3]})"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def gates_table(verdict: Verdict) -> Table:
    table = Table(box=box.SIMPLE_HEAD, expand=False, show_edge=False, pad_edge=False)
    table.add_column("gate", style="bold")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for name, result in verdict.gates.items():
        style = _STATUS_STYLE.get(result.status, "")
        marker = "▶ " if name == verdict.gate else ""
        table.add_row(f"{marker}{name}", Text(result.status, style=style), result.detail)
    return table


def timings_table(verdict: Verdict) -> Table | None:
    if not verdict.timings:
        return None
    baseline_names = sorted({k for t in verdict.timings for k in t.baselines_ms})
    table = Table(title="times (ms, medians, L2 flushed)", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("shape")
    table.add_column("reference", justify="right")
    for name in baseline_names:
        table.add_column(name, justify="right")
    table.add_column("candidate", justify="right", style="bold")
    table.add_column("over reference", justify="right")
    table.add_column("noise", justify="right")
    table.add_column("floor", justify="right")
    table.add_column("of floor", justify="right")
    if baseline_names:
        table.add_column("vs fastest baseline")
    for t in verdict.timings:
        versus = versus_timing(t)
        vs_cell = [Text(_versus_text(versus), style=_VERSUS_STYLE[versus[2]])] if versus else ["-"]
        table.add_row(
            t.label,
            _ms(t.reference_ms),
            *[_ms(t.baselines_ms.get(name)) for name in baseline_names],
            _ms(t.candidate_ms),
            _x(t.speedup),
            _pct(t.noise),
            _ms(t.floor_ms),
            _pct(t.floor_fraction),
            *(vs_cell if baseline_names else []),
        )
    return table


def feedback_panel(verdict: Verdict) -> Panel:
    fb = verdict.feedback
    body = Text()
    for label, value in (("EXPECTED", fb.expected), ("SAW", fb.saw)):
        body.append(f"{label:10}", style="bold")
        body.append(f"{value or '-'}\n")
    body.append(f"{'DEAD ENDS':10}", style="bold")
    body.append(("\n" + " " * 10).join(fb.dead_ends) if fb.dead_ends else "-")
    if fb.fence:
        body.append("\nFENCE\n", style="bold")
        body.append(fb.fence, style="dim")
    return Panel(body, title="feedback", title_align="left", border_style="cyan")


def _failure_evidence(verdict: Verdict) -> Any:
    if verdict.gate is None:
        return None
    result = verdict.gates.get(verdict.gate)
    if result is None:
        return None
    ev = result.evidence or {}
    parts: list[Any] = []
    if ev.get("traceback"):
        parts.append(Text(str(ev["traceback"]), style="red"))
    if ev.get("stderr_tail"):
        parts.append(Text("worker stderr (last lines):", style="bold"))
        parts.append(Text("\n".join(str(line) for line in ev["stderr_tail"][-10:]), style="dim"))
    if ev.get("offending_ops"):
        parts.append(Text("offending torch ops: " + ", ".join(ev["offending_ops"])))
    if ev.get("altered"):
        parts.append(Text("altered: " + ", ".join(ev["altered"])))
    if ev.get("problems"):
        parts.append(Text("\n".join(f"{k}: {v}" for k, v in ev["problems"].items())))
    if ev.get("walls"):  # the sandbox's walls the candidate ran into
        parts.append(Text("walls: " + "; ".join(str(w) for w in ev["walls"])))
    if isinstance(ev.get("then"), dict):  # what the other gates had said
        parts.append(Text("\n".join(f"{k} (before): {v}" for k, v in ev["then"].items())))
    if not parts:
        return None
    return Panel(
        Group(*parts), title=f"{verdict.gate} evidence", title_align="left", border_style="red"
    )


def summary_line(verdict: Verdict) -> Text:
    style = "bold green" if verdict.passed else "bold red"
    text = Text()
    text.append(" PASS " if verdict.passed else " FAIL ", style=f"reverse {style}")
    text.append(f"  {verdict.op} on {verdict.device}", style="bold")
    if verdict.gate:
        text.append(f"  failed at {verdict.gate}", style=style)
    merit = merit_from_timings(
        verdict.timings,
        speedup=verdict.speedup,
        floor_fraction=verdict.floor_fraction,
        noise=verdict.noise,
    )
    if merit.vs_best is not None:  # the standing first: against the fastest baseline
        rows = standing_shapes(verdict.timings)
        versus = best_baseline_name(rows) or "the fastest baseline"
        text.append(f"  {merit.vs_best:.2f}x vs {versus}", style="bold")
        counts = standing_counts(rows)
        if counts:
            text.append(f" · {counts}")
        if merit.noise is not None:
            text.append(f" · noise of the geomean {merit.noise:.1%}", style="dim")
    if verdict.speedup is not None:
        text.append(f"  {verdict.speedup:.3f}x over reference")
    if verdict.floor_fraction is not None:
        text.append(f"  {verdict.floor_fraction:.0%} of floor (largest shape)")
    if verdict.early_stop:
        text.append(f"  {early_stop_text(verdict.early_stop)}", style="yellow")
    if verdict.flags:
        text.append(f"  flags: {', '.join(verdict.flags)}", style="yellow")
    text.append(f"  [{verdict.elapsed_s:.1f} s]", style="dim")
    return text


def stages_text(stages: Mapping[str, float]) -> str:
    """A pipelined verification's stages in their order: "compile 0.4 s · waited for the
    GPU 3.3 s · correctness 0.7 s · speed 1.7 s" (the report and the app's Verdict tab)."""
    names = {
        "wait": "waited for the GPU",
        "baselines": "torch.compile's baselines",
        "references": "the reference's fingerprints",
        "audit": "the last audit",
    }
    order = ("baselines", "references", "compile", "wait", "correctness", "speed", "audit")
    return " · ".join(
        f"{names.get(k, k)} {stages[k]:.1f} s"
        for k in sorted(stages, key=lambda k: order.index(k) if k in order else 9)
    )


def stages_line(verdict: Verdict) -> Text | None:
    """The stages line of the report; None for a serial verification."""
    if not verdict.stages:
        return None
    return Text("stages: " + stages_text(verdict.stages), style="dim")


def render(verdict: Verdict, console: Console | None = None) -> None:
    """Print the whole report."""
    out = console or Console()
    out.print(summary_line(verdict))
    out.print(gates_table(verdict))
    evidence = _failure_evidence(verdict)
    if evidence is not None:
        out.print(evidence)
    times = timings_table(verdict)
    if times is not None:
        out.print(times)
    stages = stages_line(verdict)
    if stages is not None:
        out.print(stages)
    env = verdict.environment
    if env:
        bits = [f"{k} {env[k]}" for k in ("gpu", "torch", "triton", "python") if env.get(k)]
        sandbox = str(env.get("sandbox") or "")
        if sandbox.startswith("on"):  # the walls' list is long: the ABI says enough here
            bits.append("sandbox " + sandbox.split(":")[0] + ")")
        out.print(Text(" · ".join(bits), style="dim"))
        if sandbox.startswith("off"):
            out.print(
                Text(f"sandbox: {sandbox}: the candidate ran without walls", style="bold yellow")
            )
    out.print(feedback_panel(verdict))


def versus_line(verdict: Verdict) -> str | None:
    """The candidate against the fastest library baseline at each shape, one indented
    line per shape ("  32768x8192 bf16   1.00x tie (torch.compile)"); None when speed
    was not measured or no baseline ran."""
    rows = []
    for t in verdict.timings:
        versus = versus_timing(t)
        if versus is not None:
            rows.append((t.label, _versus_text(versus)))
    if not rows:
        return None
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"  {label:<{width}}  {text}" for label, text in rows)


def _saved_verdict(run_dir: Any, attempt: int) -> Verdict | None:
    """RUN_DIR/attempts/<n>.json, or None when it is missing or unreadable."""
    import json
    from pathlib import Path

    try:
        data = json.loads((Path(run_dir) / "attempts" / f"{attempt}.json").read_text())
        return Verdict.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def best_versus_line(run_dir: Any, attempt: int | None) -> str | None:
    """versus_line of a run's attempt, read from RUN_DIR/attempts/<n>.json, under a
    heading (None when the file is missing or unreadable: the summary stands without)."""
    verdict = None if attempt is None else _saved_verdict(run_dir, attempt)
    lines = None if verdict is None else versus_line(verdict)
    return f"best #{attempt} against the fastest library baseline:\n{lines}" if lines else None


STANDING_SHOWN = 3  # attempts named when none is faster everywhere


def end_of_run_lines(run_dir: Any, state: Any) -> list[str]:
    """What `optimize` prints at its end and `replay` after its table: the best by
    standing in one line (logs that record vs best), the best attempt against the fastest
    baseline per shape, the end's re-measures, then where the passing attempts stand."""
    passed = [n for n, a in sorted(state.attempts.items()) if a.passed]
    lines = (
        best_standing_line(state),
        best_versus_line(run_dir, state.best_attempt),
        confirmation_lines(state),
        standing_lines(run_dir, passed),
    )
    return [line for line in lines if line]


def best_figure(attempt: Any, *, floor: bool = True) -> str | None:
    """An attempt by the figure of merit: "#4 1.03x vs torch.compile · 3 faster 2 tie ·
    101% floor"; None when it has no vs best (older logs, no speed, no baseline)."""
    if attempt is None or getattr(attempt, "vs_best", None) is None:
        return None
    shapes = attempt.standing_shapes
    versus = best_baseline_name(shapes) or "the fastest baseline"
    parts = [f"#{attempt.number} {attempt.vs_best:.2f}x vs {versus}"]
    counts = standing_counts(shapes)
    if counts:
        parts.append(counts)
    if floor and attempt.floor_fraction is not None:
        parts.append(f"{attempt.floor_fraction:.0%} floor")
    return " · ".join(parts)


def held_mark(state: Any, attempt: int) -> str:
    """What the end's re-measure said of the run's best: "confirmed", "confirmed (#30 did
    not hold)" when the first best did not hold and this one did, "none of 3 re-measured
    held" when none did; "" when it was not re-measured."""
    from kernelladder.engine import closest_to_holding

    mine = state.confirmations.get(attempt)
    if mine is None:
        return ""
    if closest_to_holding(state) is not None:
        return f"none of {len(state.confirmations)} re-measured held"
    if not mine["held"]:
        return "did not hold"
    ranked = getattr(state, "ranked_best", None)
    if ranked is not None and ranked != attempt:
        return f"confirmed (#{ranked} did not hold)"
    return "confirmed"


def best_text(state: Any, *, floor: bool = True) -> str | None:
    """The run's best, the standing first and the reference second: "#30 1.07x vs
    torch.compile · 3 faster 2 tie · confirmed (8.11x over reference)"; None when the
    best has no vs best (no speed, no baseline)."""
    best = state.attempts.get(state.best_attempt) if state.best_attempt is not None else None
    figure = best_figure(best, floor=floor)
    if figure is None:
        return None
    mark = held_mark(state, best.number)
    over = f" ({best.speedup:.3g}x over reference)" if best.speedup is not None else ""
    return figure + (f" · {mark}" if mark else "") + over


def best_standing_line(state: Any) -> str | None:
    text = best_text(state)
    return None if text is None else f"best {text}"


def confirmation_lines(state: Any) -> str | None:
    """The end's re-measures (BestConfirmed), one line each, and when none held, which
    came closest; None when there were none."""
    from kernelladder.engine import closest_to_holding

    if not state.confirmations:
        return None
    closest = closest_to_holding(state)
    if closest is not None:
        n = len(state.confirmations)
        head = (
            f"none of the {n} re-measured attempts held; the closest to holding is "
            f"#{closest}: {state.confirmations[closest]['detail']}"
        )
        lines = [head, "re-measured at the end (back to back with the fastest baseline):"]
    else:
        lines = ["re-measured at the end (back to back with the fastest baseline):"]
    for c in state.confirmations.values():
        figure = "-" if c["vs_best"] is None else f"{c['vs_best']:.3f}x"
        recorded = "-" if c["recorded_vs_best"] is None else f"{c['recorded_vs_best']:.3f}x"
        words = standing_counts(c["shapes"])
        noise = "" if c["noise"] is None else f", noisiest shape {c['noise']:.1%}"
        verdict = "confirmed" if c["held"] else f"did not hold: {c['detail']}"
        lines.append(
            f"  #{c['attempt']}: vs best {figure} (was {recorded}), {c['rounds']} rounds"
            f"{noise}; {words or 'no standing'}; {verdict}"
        )
    return "\n".join(lines)


def standing_lines(run_dir: Any, attempts: Iterable[int]) -> str | None:
    """Where a run's passing attempts stand against the fastest library baseline over the
    whole suite: which are faster at every shape or, when none is, the few closest (by
    the run's one rule: slower nowhere first, then vs best, then the floor fraction). The best by speedup over the reference can
    lose to a baseline at one shape while another attempt ties there. None when no
    attempt has a standing at every shape (speed not measured, or no baseline ran)."""
    standings = []  # (attempt, words per shape label, speedup)
    ranks = {}
    for n in attempts:
        verdict = _saved_verdict(run_dir, n)
        if verdict is None or not verdict.passed or not verdict.timings:
            continue
        words = standing(verdict.timings)
        if len(words) == len(verdict.timings):
            standings.append((n, words, verdict.speedup or 0.0))
            merit = merit_from_timings(
                verdict.timings,
                speedup=verdict.speedup,
                floor_fraction=verdict.floor_fraction,
                noise=verdict.noise,
            )
            ranks[n] = (merit.key(), -n)  # ties: the earlier attempt first
    if not standings:
        return None
    judged = len(standings)
    everywhere = [n for n, words, _ in standings if standing_text(words) == BEATS_EVERY_BASELINE]
    if everywhere:
        names = ", ".join(f"#{n}" for n in everywhere)
        return f"faster than every baseline at every shape: {names} ({len(everywhere)} of {judged})"

    # closest by the run's one rule: slower nowhere first, then vs best, then the floor
    # (the line says so: an attempt faster at more shapes can rank lower on vs best)
    lines = [
        f"none of {judged} attempts is faster than every baseline at every shape; the "
        "closest by the run's rule (slower nowhere, then vs best):"
    ]
    for n, words, _ in sorted(standings, key=lambda item: ranks[item[0]], reverse=True)[
        :STANDING_SHOWN
    ]:
        parts = []
        for word in VERSUS_WORDS:
            labels = [label for label, w in words.items() if w == word]
            if word == "faster" and labels:
                parts.append(f"faster at {len(labels)}")
            elif labels:
                parts.append(f"{word} at {', '.join(labels)}")
        lines.append(f"  #{n}: {'; '.join(parts)}")
    return "\n".join(lines)
