"""The selected attempt's source as a diff against its parent's."""

from __future__ import annotations

import difflib
from functools import lru_cache

from textual.content import Content

from kernelladder.app.widgets.code_pane import NOTHING_SELECTED, CodePane


@lru_cache(maxsize=64)
def render_diff(parent: str, child: str, parent_name: str, child_name: str) -> Content:
    diff = list(
        difflib.unified_diff(
            parent.splitlines(),
            child.splitlines(),
            fromfile=parent_name,
            tofile=child_name,
            lineterm="",
            n=3,
        )
    )
    if not diff:
        return Content.styled("identical to its parent", "$text-muted")
    lines = []
    for line in diff:
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("@@"):
            style = "$primary"
        elif line.startswith("+"):
            style = "$success"
        elif line.startswith("-"):
            style = "$error"
        else:
            style = "$text-muted"
        lines.append(Content.styled(line, style))
    return Content("\n").join(lines)


class DiffView(CodePane):
    BODY_ID = "diff-body"

    def show(
        self,
        attempt: int | None,
        source: str | None,
        parent_source: str | None,
        parent_name: str,
    ) -> None:
        def render() -> Content | str:
            if attempt is None:
                return NOTHING_SELECTED
            if source is None or parent_source is None:
                missing = "source" if source is None else f"parent ({parent_name})"
                return Content.styled(f"no diff: {missing} not available", "$text-muted")
            return render_diff(parent_source, source, parent_name, f"#{attempt}")

        self._show((attempt, source, parent_source, parent_name), render)
