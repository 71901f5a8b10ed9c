"""The repository a newcomer opens: a README read in one sitting, links that lead
somewhere (to a file, and to a heading where they name one), package files kept by job
(under 800 lines each), no run data in bench/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
README_MAX_LINE_CHARS = 400
FILE_MAX_LINES = 800
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
REFERENCE = re.compile(r"^\[[^\]]+\]:[ \t]*([^#\s]+)(#\S*)?", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def test_readme_is_read_in_one_sitting():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > README_MAX_LINE_CHARS]
    assert not long, (
        f"README.md lines over {README_MAX_LINE_CHARS} characters (line, length): {long}"
    )


def test_readme_links_the_reference_pages():
    text = (ROOT / "README.md").read_text()
    for page in ("docs/CLI.md", "docs/TUI.md", "REMOTE_SETUP.md", "RESULTS.md"):
        assert f"]({page}" in text, page


def _doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "REMOTE_SETUP.md", ROOT / "RESULTS.md"]
    pages += sorted((ROOT / "docs").glob("*.md"))
    pages += sorted((ROOT / "docs" / "results").glob("*.md"))
    return pages


def _relative_links(page: Path) -> list[tuple[str, str]]:
    """(target, #anchor or "") of each inline and reference-style link that is not a URL."""
    text = page.read_text()
    links = LINK.findall(text) + REFERENCE.findall(text)
    return [(t, a) for t, a in links if "://" not in t and not t.startswith("mailto:")]


def _heading_ids(page: Path) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated id numbered from -1."""
    seen: dict[str, int] = {}
    ids = set()
    for heading in HEADING.findall(page.read_text()):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def test_relative_links_in_the_docs_lead_to_files():
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in _doc_pages()
        for target, _anchor in _relative_links(page)
        if not (page.parent / target).exists()
    ]
    assert not broken


def test_anchors_in_the_docs_name_a_heading_of_their_page():
    broken = [
        f"{page.relative_to(ROOT)} -> {target}{anchor}"
        for page in _doc_pages()
        for target, anchor in _relative_links(page)
        if anchor
        and target.endswith(".md")
        and (page.parent / target).exists()
        and anchor[1:] not in _heading_ids(page.parent / target)
    ]
    assert not broken


def test_package_files_stay_under_the_line_limit():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in (ROOT / "kernelladder").rglob("*.py")
    }
    over = {path: n for path, n in sizes.items() if n > FILE_MAX_LINES}
    assert not over, f"over {FILE_MAX_LINES} lines, split by job: {over}"


def test_bench_holds_tools_not_run_data():
    bench = ROOT / "bench"
    kept = sorted(p.name for p in bench.iterdir())
    assert all(p.is_file() and p.suffix in {".py", ".sh"} for p in bench.iterdir()), kept
    for tool in bench.iterdir():
        head = tool.read_text()[:2000]
        assert "python3 bench/" in head or "bash bench/" in head or "python bench/" in head, (
            f"{tool.name} does not say how to run it"
        )
