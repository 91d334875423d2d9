"""The text mcpower stores for a document whose file is not text (HTML, PDF, Word, reST, notebooks).

A format walks its document and tells a :class:`TextBuilder` what it finds, in order: headings,
paragraphs, code, table rows, page breaks. The builder writes that as light Markdown (``## Title``
lines, fenced code, ``a | b`` table rows, blank lines between blocks), which is what chunks, snippets
and ``get_source`` show, and records the sections with their line ranges in that text.
"""

from __future__ import annotations

import re

from mcpower.chunking.sections import Block, Parsed, Section

_BACKTICKS = re.compile(r"`{3,}")


class TextBuilder:
    """Collects a document's blocks, in order, into its text and its sections."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._path: list[tuple[int, str]] = []
        self._sections: list[Section] = [Section(())]
        self._has_body = [True]
        self._page_lines: list[int] = []

    @property
    def path(self) -> tuple[str, ...]:
        """The heading path blocks are added under."""
        return tuple(t for _, t in self._path)

    def heading(self, level: int, title: str) -> None:
        """Open a section at ``level`` (1 is the top); deeper headings nest under it."""
        title = " ".join(title.split())
        if not title:
            return
        self._path = [(lv, t) for lv, t in self._path if lv < level] + [(level, title)]
        self._sections.append(Section(self.path, []))
        self._has_body.append(False)
        self._add(f"{'#' * min(max(level, 1), 6)} {title}", True, body=False)

    def paragraph(self, text: str) -> None:
        """Prose: may be cut between sentences when it does not fit a chunk."""
        self._add(text, True)

    def code(self, text: str, language: str = "") -> None:
        """Code or preformatted text, fenced; cut only between lines."""
        text = _normalize(text).strip("\n")
        if not text.strip():
            return
        fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
        self._add(f"{fence}{language}\n{text}\n{fence}", False)

    def table(self, rows: list[list[str]]) -> None:
        """One line per row, cells joined with `` | ``; cut only between rows."""
        lines = [" | ".join(" ".join(cell.split()) for cell in row) for row in rows]
        self._add("\n".join(line for line in lines if line.strip(" |")), False)

    def page(self) -> None:
        """The blocks from here on are on the next page (the first call starts page 1)."""
        self._page_lines.append(len(self.lines))

    def build(self, title: str | None = None, notes: tuple[str, ...] = ()) -> Parsed:
        """The document: its text, its sections (a heading directly followed by a sub-heading lives on
        in the sub-section's path), its pages and title."""
        kept = [s for s, body in zip(self._sections, self._has_body) if s.blocks and body]
        kept = kept or [s for s in self._sections if s.blocks]  # only headings: keep them
        return Parsed(kept, title, "\n".join(self.lines), tuple(self._page_lines), notes)

    def _add(self, text: str, prose: bool, body: bool = True) -> None:
        lines = [line.rstrip() for line in _normalize(text).split("\n")]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:
            return
        if self.lines:
            self.lines.append("")
        start = len(self.lines)
        self.lines.extend(lines)
        self._sections[-1].blocks.append(Block("\n".join(lines), start, len(self.lines) - 1, prose, not body))
        if body:
            self._has_body[-1] = True


def _normalize(text: str) -> str:
    # Line numbers count "\n" only (chunking.source_lines): other line breaks become "\n".
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
