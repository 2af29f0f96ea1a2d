"""Just enough Markdown for the doc tests: tables by their header, fenced code blocks, relative links."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
# [text](target) and ![alt](target); the target ends at whitespace (an optional "title" follows) or ")".
_LINK = re.compile(
    r"!?\[(?:[^\]\\]|\\.)*\]\(\s*(?:<(?P<angled>[^>\n]*)>|(?P<target>[^)\s]+))"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+\1")


@dataclass(frozen=True)
class CodeBlock:
    language: str
    text: str
    line: int  # 1-based line of the opening fence


def cells(line: str) -> list[str]:
    """The cells of a table row, trimmed, with backticks around a whole cell removed."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    out = []
    for raw in re.split(r"(?<!\\)\|", inner):
        cell = raw.strip()
        if len(cell) >= 2 and cell.startswith("`") and cell.endswith("`") and cell.count("`") == 2:
            cell = cell[1:-1]
        out.append(cell)
    return out


def tables(text: str) -> list[list[list[str]]]:
    """Every table outside code blocks, as rows of cells; the header row first, the divider dropped."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in prose_lines(text):
        if line.lstrip().startswith("|"):
            row = cells(line)
            if all(re.fullmatch(r":?-{3,}:?", c) for c in row):
                continue
            current.append(row)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


def table_with_header(text: str, first_cell: str) -> list[list[str]]:
    """The body rows of the one table whose header starts with first_cell."""
    matching = [t for t in tables(text) if t and t[0] and t[0][0] == first_cell]
    if len(matching) != 1:
        raise AssertionError(
            f"expected one table whose header starts with {first_cell!r}, found {len(matching)}"
        )
    return matching[0][1:]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (inside ones are replaced by empty lines)."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group("fence")
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def code_blocks(text: str) -> list[CodeBlock]:
    blocks: list[CodeBlock] = []
    fence: str | None = None
    language, start = "", 0
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence, language, start, body = m.group("fence"), m.group("info").strip().split(" ")[0], number, []
        elif fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                blocks.append(CodeBlock(language=language, text="\n".join(body) + "\n", line=start))
                fence = None
            else:
                body.append(line)
    return blocks


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line, target) of every inline link, image and link reference definition outside code."""
    out: list[tuple[int, str]] = []
    for number, raw in enumerate(prose_lines(text), start=1):
        line = _INLINE_CODE.sub("", raw)
        out += [(number, m.group("angled") or m.group("target")) for m in _LINK.finditer(line)]
        ref = _REFERENCE.match(line)
        if ref:
            out.append((number, ref.group("target")))
    return out
