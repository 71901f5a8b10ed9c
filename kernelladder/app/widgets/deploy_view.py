"""The selected attempt's deploys: its kernel inside a real model (`kernelladder deploy`),
checked against the model without it and, on a GPU, timed; or the one running now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kernelladder.deploy.result import MATCH, MISMATCH, result_lines

NOT_YET = (
    "#{n} has not been deployed: press d to put its kernel into a model (the default "
    "llama-3-8b config; a tiny one without a GPU), check it against the model without it "
    "and, on a GPU, time prefill and decode (kernelladder deploy; needs the deploy extra)"
)


def deploy_content(
    attempt: int | None,
    deploys: Sequence[dict[str, Any]],
    running: str | None = None,
    failed: str | None = None,
) -> Content:
    """Newest first: what is running now (its last progress line), why the last try
    failed, then each recorded deploy's lines."""
    if attempt is None:
        return Content.styled("no attempt selected", "$text-muted")
    parts: list[Content] = []
    if running is not None:
        parts.append(Content.styled(f"deploying #{attempt} now: {running}", "$warning"))
    if failed:
        parts.append(Content.styled(f"the deploy of #{attempt} failed: {failed}", "$error"))
    for d in reversed(list(deploys)):
        if parts:
            parts.append(Content(""))
        parts += _record(d)
    if not parts:
        return Content.styled(NOT_YET.format(n=attempt), "$text-muted")
    return Content("\n").join(parts)


def _record(d: dict[str, Any]) -> list[Content]:
    result = d.get("result") or {}
    status = d.get("status") or result.get("status")
    style = {MATCH: "$success", MISMATCH: "$error"}.get(status or "", "$warning")
    where = f" (event #{d['seq']})" if isinstance(d.get("seq"), int) and d["seq"] >= 0 else ""
    head = Content.styled(f"{str(status).upper()}{where}: {d.get('summary', '')}", f"bold {style}")
    lines = result_lines(result) if result else []
    return [head, *(Content(line) for line in lines)]


class DeployView(VerticalScroll):
    DEFAULT_CSS = """
    DeployView {
        background: $surface;
        padding: 0 1;
    }
    """

    def compose(self):
        yield Static(deploy_content(None, ()), id="deploy-text")

    def show(
        self,
        attempt: int | None,
        deploys: Sequence[dict[str, Any]],
        running: str | None = None,
        failed: str | None = None,
    ) -> None:
        self.query_one("#deploy-text", Static).update(
            deploy_content(attempt, deploys, running, failed)
        )
