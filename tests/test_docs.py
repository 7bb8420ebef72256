"""The documentation holds together: every relative link of the README and of ``docs/`` resolves.

A link resolves when the file it names exists (relative to the page) and, when it names a
heading (``page.md#anchor``, or ``#anchor`` within the page), that page has the heading, with
anchors made as GitHub makes them.  The README is the front door and stays short.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks, with inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, INLINE_CODE.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``, headings read with their inline code (GitHub keeps the code's text)."""
    seen: dict[str, int] = {}
    out, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in prose(page.read_text(encoding="utf-8")) for m in LINK.finditer(line)]


def test_the_pages_exist():
    assert (ROOT / "README.md").is_file()
    names = {p.name for p in PAGES}
    for page in (
        "architecture.md",
        "passes.md",
        "kernels.md",
        "runtime.md",
        "integration.md",
        "engine.md",
        "bench.md",
        "results.md",
        "build-performance.md",
        "testing.md",
        "references.md",
    ):
        assert page in names, f"docs/{page} is missing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    problems = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT).as_posix()}:{n}: ({target})"
        if not dest.exists():
            problems.append(f"{where} names a file that does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} names no heading of {dest.relative_to(ROOT).as_posix()}")
    assert not problems, "broken links:\n  " + "\n  ".join(problems)


def test_the_readme_is_the_front_door():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail into docs/"


def test_the_readme_links_every_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(ROOT / "README.md") if not t.startswith("#")}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"README.md links no docs/ page {missing}"


def test_slugs_are_githubs():
    assert slug("Predicted vs measured: Qwen3-0.6B, depth 3") == "predicted-vs-measured-qwen3-06b-depth-3"
    assert slug("`specgen bench`") == "specgen-bench"
    assert slug("#1962: the final draft -> target verification boundary (MTP)") == (
        "1962-the-final-draft---target-verification-boundary-mtp"
    )
    assert slug("spec_verify_token_update") == "spec_verify_token_update"
