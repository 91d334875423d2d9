"""The document view's data: a window of a document's stored text around a result's passage,
with line numbers, the passage's lines marked, and the chunks the window holds (to show how the
document was cut).

A document can be megabytes: the page shows at most :data:`MAX_WINDOW_LINES` lines of it, and no
more than :data:`MAX_WINDOW_HTML` bytes of HTML (a longer line is cut, saying how much was left
out), with links to the lines before and after.
"""

from __future__ import annotations

from typing import Any

from mcpower.lookups import resolve
from mcpower.registry import Registry
from mcpower.server.responses import Redactor
from mcpower.web.text import MAX_MARKS, visible

# Lines of context shown above the passage by default, and the window's default and largest size.
CONTEXT_LINES = 12
WINDOW_LINES = 120
MAX_WINDOW_LINES = 400
# A page stays under 100 KB of HTML: the window's lines may take this much as HTML (escaped, with
# their markup), and one line at most a tenth of it (a longer one is cut, saying by how much).
MAX_WINDOW_HTML = 64_000
MAX_LINE_HTML = 6_400
LINE_MARKUP = 150  # the HTML around each line's text: number, classes, ids
# Chunks looked at on each side of the passage's for the boundaries shown in the window.
MAX_CHUNKS_AROUND = 200


def html_size(text: str) -> int:
    """Bytes ``text`` takes in the page (escaped, hidden characters marked)."""
    return len(str(visible(text)).encode("utf-8"))


def fit_line(text: str) -> tuple[str, int]:
    """``text``, cut to take at most :data:`MAX_LINE_HTML` bytes in the page, and how many
    characters were cut."""
    if len(text) * 6 + MAX_MARKS * 48 <= MAX_LINE_HTML or html_size(text) <= MAX_LINE_HTML:  # escaping: 6x at most
        return text, 0
    keep = min(len(text), MAX_LINE_HTML)
    while keep > 0 and html_size(text[:keep]) > MAX_LINE_HTML:
        keep = keep * 3 // 4
    return text[:keep], len(text) - keep


def document_window(
    registry: Registry,
    result_id: str,
    source: dict[str, Any],
    redactor: Redactor,
    first: int | None = None,
    size: int = WINDOW_LINES,
) -> dict[str, Any]:
    """The window of the document behind ``result_id`` (``source``: knowledge_get_source's answer
    for it, scope chunk) starting at line ``first`` (default: a little above the passage).

    Raises:
        ResultNotFoundError: the result id names no chunk (any more).
    """
    from mcpower.chunking import source_lines  # not loaded for a search

    store, hit = resolve(registry, result_id)
    doc = store.document_by_id(hit.document_id)
    lines = source_lines(doc.content) if doc is not None else []
    total = len(lines)
    passage = (int(source["lines"]["start"]), int(source["lines"]["end"]))
    size = max(1, min(size, MAX_WINDOW_LINES))
    if first is None:
        first = passage[0] - CONTEXT_LINES
        size = max(size, min(passage[1] - first + 1 + CONTEXT_LINES, MAX_WINDOW_LINES))
    first = max(1, min(first, max(total, 1)))
    shown: list[dict[str, Any]] = []
    weight = 0
    n = first
    while n <= total and n < first + size:
        text, cut = fit_line(redactor.folders(lines[n - 1]))
        cost = html_size(text) + LINE_MARKUP
        if shown and weight + cost > MAX_WINDOW_HTML:
            break
        weight += cost
        shown.append({"n": n, "text": text, "cut": cut, "passage": passage[0] <= n <= passage[1]})
        n += 1
    last = n - 1
    around = [
        c
        for c in store.neighbors(hit, MAX_CHUNKS_AROUND, MAX_CHUNKS_AROUND)
        if c.end_line >= first and c.start_line <= last
    ]
    starts: dict[int, list[int]] = {}
    for c in around:
        starts.setdefault(max(c.start_line, first), []).append(c.ordinal)
    chunks = [
        {
            "ordinal": c.ordinal,
            "start": c.start_line,
            "end": c.end_line,
            "heading_path": redactor.folders(c.heading_path[:512]),
            "pages": {"start": c.page_start, "end": c.page_end} if c.page_start is not None else None,
            "current": c.id == hit.id,
        }
        for c in around
    ]
    for line in shown:
        line["chunks"] = starts.get(line["n"], [])
    return {
        "first": first,
        "last": last,
        "total_lines": total,
        "passage": {"start": passage[0], "end": passage[1]},
        "lines": shown,
        "chunks": chunks,
        "previous": max(1, first - size) if first > 1 else None,
        "next": last + 1 if last < total else None,
        "size": size,
        "document": {
            "path": redactor.folders(doc.path) if doc else source.get("source_path"),
            "title": redactor.folders(doc.title) if doc else source.get("title"),
            "file_type": doc.file_type if doc else None,
            "size": doc.size if doc else None,
            "indexed_at": doc.indexed_at if doc else None,
            "chunk_count": store.chunk_count(hit.document_id),
        },
    }
