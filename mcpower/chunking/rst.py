"""reStructuredText (.rst): a title is a line underlined (and maybe overlined) by punctuation;
the text between titles is paragraphs."""

from __future__ import annotations

import re

from mcpower.chunking.sections import Parsed, Section
from mcpower.chunking.text import front_matter, paragraphs

TYPES = frozenset({".rst"})

_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}[ \t]*$")


def parse(text: str) -> Parsed:
    """Sections by title; the document title is the first top-level one."""
    lines = text.split("\n")
    styles: list[str] = []
    path: list[tuple[int, str]] = []
    sections: list[Section] = []
    title_lines: dict[int, tuple[int, str]] = {}
    for n in range(1, len(lines)):
        under, title = lines[n].strip(), lines[n - 1].strip()
        if title and _ADORNMENT.match(under) and len(under) >= len(title) and not _ADORNMENT.match(title):
            over = n >= 2 and lines[n - 2].strip() == under
            style = ("o" if over else "") + under[0]
            if style not in styles:
                styles.append(style)
            # The section starts at the overline, if any, so it is not left behind as a chunk of its own.
            title_lines[n - 2 if over else n - 1] = (styles.index(style) + 1, title)
    h1 = None
    seg_start = 0
    for n in [*sorted(title_lines), len(lines)]:
        sections.append(paragraphs(lines[:n], seg_start, tuple(t for _, t in path)))
        if n == len(lines):
            break
        level, title = title_lines[n]
        h1 = h1 or (title if level == 1 else None)
        path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
        seg_start = n
    return Parsed([s for s in sections if s.blocks], h1 or front_matter(text)[0])
