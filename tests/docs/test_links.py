"""Every relative link in the README and docs/ points to a file that exists (and, into a Markdown file, to
a heading that exists), and the docs index lists every example."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.markdown import link_targets, prose_lines

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(?P<text>.+?)\s*#*\s*$")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens, and a
    -1, -2, ... suffix for repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose_lines(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group("text"))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def test_the_pages_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/README.md", "docs/call-your-model.md", "docs/status-reference.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for line, target in link_targets(page.read_text()):
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.split("?", 1)[0])
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(REPO)}:{line}: {target}"
        if not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif not resolved.is_relative_to(REPO):
            broken.append(f"{where} (outside the repository)")
        elif anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
            broken.append(f"{where} (no such heading in {resolved.relative_to(REPO)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_the_docs_index() -> None:
    targets = {target for _, target in link_targets((REPO / "README.md").read_text())}
    assert "docs/README.md" in targets


def test_the_docs_index_lists_every_example() -> None:
    index = REPO / "docs" / "README.md"
    linked = {
        (index.parent / target).resolve()
        for _, target in link_targets(index.read_text())
        if not EXTERNAL.match(target)
    }
    examples = sorted((REPO / "examples").rglob("*.yaml"))
    assert examples
    missing = [e.relative_to(REPO).as_posix() for e in examples if e.resolve() not in linked]
    assert not missing, f"add to the Examples table of docs/README.md: {missing}"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("see [the doc](docs/a.md#part) and ![fig](b.png)", ["docs/a.md#part", "b.png"]),
        ("[t](<with space.md> \"title\") [u](e.md 'title')", ["with space.md", "e.md"]),
        ("`[not](a/link.md)` but [this](c.md)", ["c.md"]),
        ("[ref]: ../d.md", ["../d.md"]),
    ],
)
def test_link_targets_are_read_from_prose(line: str, expected: list[str]) -> None:
    assert [t for _, t in link_targets(line)] == expected


def test_links_inside_code_blocks_are_not_links() -> None:
    assert link_targets("```\n[a](missing.md)\n```\n[b](here.md)\n") == [(4, "here.md")]
