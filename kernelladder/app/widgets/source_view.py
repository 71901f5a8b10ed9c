"""The selected attempt's source, syntax-highlighted in the theme's own colours."""

from __future__ import annotations

from functools import lru_cache

from pygments.lexers import PythonLexer
from pygments.token import Comment, Keyword, Name, Number, String, Token
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

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


class SourceView(VerticalScroll):
    DEFAULT_CSS = """
    SourceView {
        background: $surface;
    }
    SourceView > Static {
        width: auto;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[int | None, str | None] | None = None

    def compose(self):
        yield Static("no attempt selected", id="source-body")

    def show(self, attempt: int | None, source: str | None) -> None:
        if (attempt, source) == self._shown:
            return
        self._shown = (attempt, source)
        body = self.query_one("#source-body", Static)
        if attempt is None:
            body.update("no attempt selected")
        elif source is None:
            body.update(Content.styled(f"source of #{attempt} not available", "$text-muted"))
        else:
            body.update(highlight(source))
