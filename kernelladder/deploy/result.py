"""A deploy's result: one JSON object (what `deploy --json` prints and the DeployChecked
event carries) and the lines every view shows of it (the CLI, `replay`, the headless
summary, the app's Deploy tab). Plain Python: the app imports this without torch.
"""

from __future__ import annotations

from typing import Any

RESULT_SCHEMA_VERSION = 1
MATCH, MISMATCH, NOT_USED, ERROR = "match", "mismatch", "not-used", "error"


def exit_code(result: dict[str, Any]) -> int:
    """0 when the patched model matches; 1 otherwise (a mismatch, a kernel that did not
    load, or no place for the kernel in this model: nothing was shown to match)."""
    return 0 if result.get("status") == MATCH else 1


def model_text(result: dict[str, Any]) -> str:
    m = result.get("model") or {}
    sizes = ", ".join(
        part
        for part in (
            f"{m.get('layers')} layers" if m.get("layers") is not None else "",
            f"hidden {m.get('hidden')}" if m.get("hidden") else "",
            _heads(m),
            f"vocab {m.get('vocab')}" if m.get("vocab") else "",
        )
        if part
    )
    tiny = "tiny: " if m.get("tiny") else ""
    return f"{m.get('name', '?')} ({tiny}{sizes})" if sizes else str(m.get("name", "?"))


def _heads(m: dict[str, Any]) -> str:
    heads, kv, d = m.get("heads"), m.get("kv_heads"), m.get("head_dim")
    if not heads:
        return ""
    kv_part = f" ({kv} KV)" if kv and kv != heads else ""
    return f"{heads} heads{kv_part} of {d}" if d else f"{heads} heads{kv_part}"


def workload_text(result: dict[str, Any]) -> str:
    w = result.get("workload") or {}
    where = result.get("device") or "?"
    if result.get("gpu"):
        where = f"{where} ({result['gpu']})"
    elif result.get("interpreter"):
        where = f"{where} (Triton's interpreter)"
    return (
        f"{(result.get('model') or {}).get('dtype', '?')}, batch {w.get('batch')} x prompt "
        f"{w.get('prompt')} + {w.get('new_tokens')} new tokens, seed {w.get('seed')}, on {where}"
    )


def summary_line(result: dict[str, Any]) -> str:
    """One line: what went where and what came of it."""
    kernel = result.get("kernel") or "?"
    head = f"{result.get('op')} {kernel} in {(result.get('model') or {}).get('name', '?')}"
    status = result.get("status")
    if status == ERROR:
        return f"{head}: error: {result.get('error', '')}"
    if status == NOT_USED:
        return f"{head}: {(result.get('placement') or {}).get('where', 'not used by this model')}"
    check = result.get("check") or {}
    word = "matches" if status == MATCH else "does not match"
    failure = check.get("failure")
    if failure:
        word += f" (first at {failure.get('site')}, {failure.get('phase')})"
    elif status == MISMATCH and check.get("status") == MATCH:  # the check held, timing did not
        word += f" ({result.get('speed_note', '')})"
    elif status == MISMATCH:
        word += f" ({_why_mismatch(check)})"
    speed = result.get("speed")
    tail = ""
    if speed:
        best = _compare_text(speed, "eager", "decode")
        tail = f"; {best}" if best else ""
    else:
        tail = "; speed not measured"
    return f"{head}: the patched model {word}{tail}"


def _why_mismatch(check: dict[str, Any]) -> str:
    logits, tokens = check.get("logits") or {}, check.get("tokens") or {}
    if logits and not logits.get("within"):
        return f"logits off by {logits.get('max_deviation', 0):.3g}, allowed {logits.get('allowed', 0):.3g}"
    diff = tokens.get("first_difference") if tokens else None
    if diff:
        return f"token {diff['step']} of row {diff['row']}: {diff['saw']} for {diff['expected']}"
    if not (check.get("calls") or {}).get("prefill") and not (check.get("calls") or {}).get(
        "decode"
    ):
        return "the kernel never ran"
    return "see the check"


def _compare_text(speed: dict[str, Any], mode: str, phase: str) -> str:
    for c in speed.get("comparisons") or []:
        if c.get("phase") == phase and c.get("patched", "").endswith(
            "eager" if mode == "eager" else "torch.compile"
        ):
            return f"{phase} {c['speedup']:.3f}x ({c['standing']}) patched vs unpatched {mode}"
    return ""


def result_lines(result: dict[str, Any]) -> list[str]:
    """The whole result as text lines (EXPECTED / SAW for a mismatch, the speed table)."""
    lines = [
        f"deploy {result.get('op')} {result.get('kernel')} into {model_text(result)}",
        f"  {workload_text(result)}",
    ]
    if result.get("status") == ERROR:
        lines.append(f"ERROR: {result.get('error', '')}")
        return lines
    placement = result.get("placement") or {}
    lines.append(f"where: {placement.get('where', '?')}")
    lines += [f"  note: {n}" for n in placement.get("notes") or []]
    if result.get("status") == NOT_USED:
        return lines
    lines += check_lines(result.get("check") or {})
    lines += speed_lines(result)
    return lines


def check_lines(check: dict[str, Any]) -> list[str]:
    status = check.get("status")
    calls = check.get("calls") or {}
    lines = []
    word = {MATCH: "MATCH", MISMATCH: "MISMATCH"}.get(status or "", str(status).upper())
    ran = (
        f"{calls.get('prefill', 0)} prefill and {calls.get('decode', 0)} decode calls of the kernel"
    )
    lines.append(f"check: {word}: {ran} in {calls.get('sites', 0)} places")
    for fb in calls.get("fallbacks") or []:
        lines.append(f"  {fb['calls']} {fb['phase']} calls ran the model's own code: {fb['why']}")
    failure = check.get("failure")
    if failure:
        lines.append(
            f"  FAILED at {failure['site']} ({failure['phase']}, call {failure['call']} there)"
        )
        lines.append(f"  EXPECTED  {failure['expected']}")
        lines.append(f"  SAW       {failure['saw']}")
        if failure.get("detail"):
            lines.append(f"            {failure['detail']}")
    elif calls.get("checked"):
        lines.append(
            f"  each call against the model's own on the same inputs: {calls['checked']} "
            f"checked, the worst at {calls.get('worst_ratio', 0):.2f} of the op's tolerance"
            + (f" ({calls['worst_site']})" if calls.get("worst_site") else "")
        )
    if calls.get("out_of_tolerance", 0) > 1:
        lines.append(f"  {calls['out_of_tolerance']} calls out of tolerance in all")
    logits = check.get("logits")
    if logits:
        ok = "within" if logits.get("within") else "NOT within"
        lines.append(
            f"  logits: {ok} {logits['tolerance']}: max deviation {logits['max_deviation']:.3g} "
            f"of {logits['allowed']:.3g} allowed, over {logits['positions']} positions"
        )
        worst = logits.get("worst") or {}
        if not logits.get("within") and worst:
            lines.append(f"  EXPECTED  {worst.get('expected'):.6g} at {worst.get('where')}")
            lines.append(f"  SAW       {worst.get('saw'):.6g}")
    tokens = check.get("tokens")
    if tokens:
        text = (
            f"  greedy tokens: {tokens['equal']} of {tokens['total']} equal "
            f"({tokens['steps']} steps x {tokens['rows']} rows, each step fed the unpatched "
            f"run's tokens); {_first_equal(tokens)}"
        )
        lines.append(text)
        if tokens.get("near_tie_count"):
            t = tokens["near_ties"][0]
            lines.append(
                f"  {tokens['near_tie_count']} near-tie(s), not mismatches: e.g. token {t['step']} "
                f"of row {t['row']}: the unpatched model's two best logits {t['gap']:.3g} apart, "
                f"the patched logits {t['deviation']:.3g} off"
            )
        diff = tokens.get("first_difference")
        if diff:
            lines.append(
                f"  EXPECTED  token {diff['expected']} (generated token {diff['step']}, row {diff['row']})"
            )
            lines.append(
                f"  SAW       token {diff['saw']} (the unpatched model's two best logits "
                f"{diff['gap']:.3g} apart, the patched logits only {diff['deviation']:.3g} off)"
            )
    return lines


def _first_equal(tokens: dict[str, Any]) -> str:
    k, steps = tokens.get("first_equal_steps", 0), tokens.get("steps", 0)
    if k >= steps:
        return "every step equal in every row"
    return f"the first {k} step{'s' if k != 1 else ''} equal in every row"


# (title, key, format) per column: each phase's time, then its tokens a second and the
# noise of its rounds
SPEED_COLUMNS = tuple(
    column
    for phase, time_title, time_key in (
        ("prefill", "prefill ms", "prefill_ms"),
        ("decode", "decode ms/token", "decode_ms_per_token"),
    )
    for column in (
        (time_title, time_key, "{:.3f}"),
        ("tok/s", f"{phase}_tok_s", "{:,.0f}"),
        ("noise", f"{phase}_noise", "{:.1%}"),
    )
)


def speed_table(rows: list[dict[str, Any]]) -> list[str]:
    """The timing rows as aligned columns (two spaces between, whatever the widths)."""
    cells = [["", *(title for title, _, _ in SPEED_COLUMNS)]]
    notes = []
    for row in rows:
        if not row.get("measured"):
            notes.append(f"{row['variant']}: not measured: {row.get('why', '')}")
            continue
        cells.append([row["variant"], *(f.format(row[key]) for _, key, f in SPEED_COLUMNS)])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    out = []
    for r in cells:
        rest = "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))
        out.append(r[0].ljust(widths[0]) + rest)
    return out + notes


def speed_lines(result: dict[str, Any]) -> list[str]:
    speed = result.get("speed")
    if not speed:
        return [f"speed: {result.get('speed_note') or 'not measured'}"]
    w = result.get("workload") or {}
    lines = [
        f"speed: {speed['rounds']} back-to-back rounds after a warm-up; medians, noise = IQR / "
        f"median over the rounds; prefill {w.get('batch')} x {w.get('prompt')} tokens, decode "
        f"{speed['decode_steps']} steps x {w.get('batch')} rows"
    ]
    if result.get("run_live"):
        lines.append("  timed while the run was live: its verifications may have shared the GPU")
    lines += [f"  {line}" for line in speed_table(speed.get("rows") or [])]
    for c in speed.get("comparisons") or []:
        lines.append(
            f"  {c['patched']} vs unpatched, {c['phase']}: {c['speedup']:.3f}x, {c['standing']} "
            f"({c['won']} rounds won, {c['lost']} lost of {c['rounds']})"
        )
    if speed.get("compile_error"):
        lines.append(f"  torch.compile: {speed['compile_error']}")
    return lines
