"""The selected attempt's source, syntax-highlighted in the theme's own colours."""

from __future__ import annotations

from functools import lru_cache

from pygments.lexers import PythonLexer
from pygments.token import Comment, Keyword, Name, Number, String, Token
from textual.content import Content

from kernelladder.app.widgets.code_pane import NOTHING_SELECTED, CodePane

# Token type -> style made of theme variables (never fixed colours).
TOKEN_STYLES: tuple[tuple[object, str], ...] = (
    (Comment, "italic $text-muted"),
    (String, "$success"),
    (Number, "$warning"),
    (Keyword, "bold $accent"),
    (Name.Decorator, "$secondary"),
    (Name.Builtin, "$secondary"),
    (Name.Function, "bold $primary"),
    (Name.Class, "bold $primary"),
)


def _style_of(token_type) -> str:
    for kind, style in TOKEN_STYLES:
        if token_type in kind:
            return style
    return ""


@lru_cache(maxsize=64)
def highlight(source: str) -> Content:
    """Python source as Content with line numbers; cached (sources never change)."""
    lexer = PythonLexer(stripnl=False, ensurenl=False)
    lines: list[list[tuple[str, str]]] = [[]]
    for token_type, text in lexer.get_tokens(source):
        if token_type is Token.Text and text == "":
            continue
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if part:
                lines[-1].append((part, _style_of(token_type)))
    if lines and not lines[-1]:
        lines.pop()
    width = len(str(len(lines)))
    out = [
        Content.assemble((f"{n:>{width}} ", "$text-muted"), *parts)
        for n, parts in enumerate(lines, 1)
    ]
    return Content("\n").join(out)


class SourceView(CodePane):
    BODY_ID = "source-body"

    def show(self, attempt: int | None, source: str | None) -> None:
        def render() -> Content | str:
            if attempt is None:
                return NOTHING_SELECTED
            if source is None:
                return Content.styled(f"source of #{attempt} not available", "$text-muted")
            return highlight(source)

        self._show((attempt, source), render)
