"""The repository a newcomer opens: a README read in one sitting, links that lead
somewhere, package files kept by job (under 800 lines each), no run data in bench/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
README_MAX_LINE_CHARS = 400
FILE_MAX_LINES = 800
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


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


def test_relative_links_in_the_docs_lead_to_files():
    pages = [ROOT / "README.md", ROOT / "REMOTE_SETUP.md", ROOT / "RESULTS.md"]
    pages += sorted((ROOT / "docs").glob("*.md"))
    broken = []
    for page in pages:
        for target, _anchor in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
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
