"""Plain text (.txt): paragraphs, runs of non-blank lines, under no heading.

Also the pieces other formats share: YAML front matter (its ``title:``), and paragraph blocks.
"""

from __future__ import annotations

import re

from mcpower.chunking.sections import Block, Parsed, Section

TYPES = frozenset({".txt"})

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
# The value is stripped after matching: "(.+?)[ \t]*$" was quadratic in a line of spaces (22 s for
# "title: a", 40,000 spaces, "b").
_FM_TITLE = re.compile(r"^title[ \t]*:(.+)", re.M)


def parse(text: str) -> Parsed:
    title, body_start = front_matter(text)
    return Parsed([paragraphs(text.split("\n"), body_start, ())], title)


def front_matter(text: str) -> tuple[str | None, int]:
    """The ``title:`` of a leading YAML front matter block, and the line the body starts at."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return None, 0
    t = _FM_TITLE.search(m.group(1))
    title = t.group(1).strip().strip("\"'") if t else None
    return title or None, text[: m.end()].count("\n")


def paragraphs(lines: list[str], start: int, heading: tuple[str, ...]) -> Section:
    """The lines from ``start`` on as one section whose blocks are runs of non-blank lines."""
    blocks: list[Block] = []
    n = start
    while n < len(lines):
        if not lines[n].strip():
            n += 1
            continue
        first = n
        while n < len(lines) and lines[n].strip():
            n += 1
        blocks.append(Block("\n".join(lines[first:n]), first, n - 1, True))
    return Section(heading, blocks)
