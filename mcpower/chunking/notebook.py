"""Jupyter notebooks (.ipynb): Markdown cells as prose with their headings, code cells as fenced
code in the notebook's language; outputs are dropped.

The stored text is the cells in order, written as one Markdown document (chunked like any other),
so line ranges point into that text, not into the JSON. Reads nbformat 4 and the older 3
(worksheets). Parsed with the standard library's json: peak memory is about twice the file.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcpower.chunking import markdown
from mcpower.chunking.sections import Parsed, UnreadableError

TYPES = frozenset({".ipynb"})

_BACKTICKS = re.compile(r"`{3,}")


def extract(data: bytes) -> Parsed:
    """The notebook's cells as one Markdown text.

    Raises:
        UnreadableError: not JSON, or not a notebook.
    """
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError) as e:  # ValueError covers bad UTF-8 and bad JSON
        raise UnreadableError(f"not a notebook: not valid JSON ({' '.join(str(e).split())[:120]})") from e
    if not isinstance(nb, dict):
        raise UnreadableError("not a notebook: the JSON is not an object")
    cells = nb.get("cells")
    if cells is None and isinstance(nb.get("worksheets"), list):  # nbformat 3
        cells = [c for ws in nb["worksheets"] if isinstance(ws, dict) for c in _list(ws.get("cells"))]
    if not isinstance(cells, list):
        raise UnreadableError("not a notebook: no list of cells")
    metadata = nb["metadata"] if isinstance(nb.get("metadata"), dict) else {}
    language = _language(metadata)
    parts = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type")
        source = _text(cell.get("source", cell.get("input")))
        if not source.strip():
            continue
        if kind in ("markdown", "heading"):
            level = cell.get("level") if kind == "heading" else None  # nbformat 3 heading cells
            parts.append(f"{'#' * level} {source}" if isinstance(level, int) and 1 <= level <= 6 else source)
        else:  # code and raw cells: fenced, so nothing in them reads as Markdown
            fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(source)), default=0) + 1)
            parts.append(f"{fence}{language if kind == 'code' else ''}\n{source.strip(chr(10))}\n{fence}")
    text = "\n\n".join(p.replace("\r\n", "\n").replace("\r", "\n").strip("\n") for p in parts)
    parsed = markdown.parse(text)
    title = parsed.title or _text(metadata.get("title")) or None
    return Parsed(parsed.sections, title, text)


def _language(metadata: dict[str, Any]) -> str:
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(key)
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return re.sub(r"[^\w+-]", "", value[field])[:20]
    return ""


def _text(source: Any) -> str:
    """A cell's source: a string, or a list of strings (lines) in the JSON."""
    if isinstance(source, str):
        return source
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
