"""Source code, shared by the language modules (python.py, javascript.py, go.py, rust.py, java.py):
chunks follow top-level definitions, each definition's name in the heading path.

Code is read only when asked for (``--code``, or an ``--include`` glob naming the suffix), and
stored as written: line ranges are the file's own. Within a definition, blocks are runs of lines
between blank lines, cut only between lines.

Languages other than Python (which is parsed with ``ast``) follow one rule, with no parser: a
definition starts at a line in column 0 that begins with one of the language's definition keywords
(after modifiers such as ``export``, ``pub``, ``async``); comment, attribute and decorator lines
directly above it (``//``, ``/*``, ``*``, ``#[``, ``@``) belong to it; it ends before the next
definition starts, trailing blank lines left out. Its name is the word after the keyword. On real
files (Go, Rust, JavaScript) this found the same definitions as tree-sitter's grammars. Nested
definitions (methods inside a class or an ``impl``) stay in their parent's chunks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mcpower.chunking.sections import Block, Parsed, Section

Span = tuple[tuple[str, ...], int, int]  # heading path, first and last line (0-based, inclusive)

_ABOVE = re.compile(r"(//|/\*|\*|#\[|#!\[|@)")
# The name after a keyword, past a Go receiver "(r *T)". The receiver holds no "(": with "[^)]*" a
# line of "(fn " read to its end from every keyword (40 s for 48 KB).
_NAME = re.compile(
    r"(?:fn|func|def|struct|enum|trait|impl|mod|type|class|interface|record|function\*?|const|let|var|static|union"
    r"|namespace|macro_rules!)\s+(?:\([^()]*\)\s*)?([\w$]+)"
)


def column_rule(keywords: str) -> Callable[[str], Parsed]:
    """A ``parse`` for a language whose definitions start at column 0 with ``keywords`` (a regex
    matched at the start of the line)."""
    start = re.compile(keywords)

    def parse(text: str) -> Parsed:
        return Parsed(sections(text.split("\n"), definitions(text.split("\n"), start)))

    return parse


def definitions(lines: list[str], start: re.Pattern[str]) -> list[Span]:
    """The spans of the top-level definitions the column-0 rule finds."""
    starts: list[tuple[str, int]] = []
    for i, line in enumerate(lines):
        if line[:1].strip() and start.match(line):
            first = i
            while first > 0 and _ABOVE.match(lines[first - 1].lstrip()) and (not starts or first - 1 > starts[-1][1]):
                first -= 1
            m = _NAME.search(line)
            starts.append((m.group(1) if m else " ".join(line.split())[:60], first))
    spans: list[Span] = []
    for k, (name, first) in enumerate(starts):
        last = starts[k + 1][1] - 1 if k + 1 < len(starts) else len(lines) - 1
        while last > first and not lines[last].strip():
            last -= 1
        spans.append(((name,), first, last))
    return spans


def sections(lines: list[str], spans: list[Span]) -> list[Section]:
    """Sections for non-overlapping ``spans`` in line order; the lines between them (imports,
    module-level statements) go under no heading."""
    out: list[Section] = []
    line = 0
    for path, first, last in [*spans, ((), len(lines), len(lines))]:
        if first > line:
            out.append(Section((), _blocks(lines, line, first - 1)))
        if first < len(lines):
            out.append(Section(path, _blocks(lines, first, last)))
        line = max(line, last + 1)
    return [s for s in out if s.blocks]


def _blocks(lines: list[str], first: int, last: int) -> list[Block]:
    """Runs of non-blank lines between ``first`` and ``last``, cut only between lines."""
    blocks: list[Block] = []
    n = first
    while n <= last:
        if not lines[n].strip():
            n += 1
            continue
        begin = n
        while n <= last and lines[n].strip():
            n += 1
        blocks.append(Block("\n".join(lines[begin:n]), begin, n - 1, False))
    return blocks
