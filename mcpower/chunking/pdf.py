"""PDF (.pdf), read with pypdf: the text of each page, headings from the outline (bookmarks).

- Each outline entry becomes a heading at the top of the page it points to (a PDF does not say
  where on the page its text starts); nested entries nest. Without an outline there are no headings.
- Chunks never mix pages without saying so: each carries its first and last page (from 1, the
  page's position in the file, not its printed label).
- A word hyphenated at a line end is joined when the next line goes on in lower case
  ("documen-\\ntation" -> "documentation"); runs of spaces become one.
- Skipped, with the reason: encrypted with a password, no text layer (scanned), damaged. pypdf
  refuses streams that inflate past its own limit (75 MB), and the worker process bounds the rest.
- Title: the document's metadata title, else the file name.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from typing import Any

from mcpower.chunking.extracted import TextBuilder
from mcpower.chunking.sections import Parsed, UnreadableError

TYPES = frozenset({".pdf"})

# Outline entries beyond this are not read (a real book has hundreds; a hostile file, millions).
MAX_OUTLINE_ENTRIES = 10_000
_HYPHEN_BREAK = re.compile(r"(\w)-\n(?=[a-z])")
_SPACES = re.compile(r"[ \t\xa0]+")


def extract(data: bytes) -> Parsed:
    """The text of every page, with the outline's headings.

    Raises:
        UnreadableError: not a PDF, encrypted, damaged, or no text at all.
    """
    if b"%PDF-" not in data[:1024]:
        raise UnreadableError("not a PDF (no %PDF- header)")
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    # pypdf reports what it repairs through logging and warnings: nothing of it reaches the terminal.
    logging.getLogger("pypdf").addHandler(logging.NullHandler())
    logging.getLogger("pypdf").propagate = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                try:
                    if not reader.decrypt(""):
                        raise UnreadableError("encrypted: a password is required to open it")
                except DependencyError as e:
                    raise UnreadableError(f"encrypted in a way pypdf cannot read here ({e})") from e
            pages = reader.pages
            count = len(pages)
            title = _title(reader)
            outline = _outline(reader)
        except UnreadableError:
            raise
        except Exception as e:  # a damaged file makes pypdf raise almost anything
            raise UnreadableError(f"damaged PDF ({_describe(e)})") from e
        texts, failed = [], []
        for n in range(count):
            try:
                texts.append(_clean(pages[n].extract_text() or ""))
            except Exception as e:  # one bad page does not lose the others
                texts.append("")
                failed.append(f"{n + 1} ({_describe(e)})")
    if not any(t.strip() for t in texts):
        if failed:
            raise UnreadableError(f"damaged PDF: no page could be read (page {failed[0]})")
        raise UnreadableError("no text layer (a scanned or image-only PDF); run OCR on it first")
    notes = []
    if failed:
        notes.append(f"{len(failed)} of {count} pages could not be read: page {', '.join(failed[:3])}")
    empty = sum(1 for t in texts if not t.strip()) - len(failed)
    if empty:
        notes.append(f"{empty} of {count} pages have no text (images only?)")
    builder = TextBuilder()
    for n, text in enumerate(texts):
        builder.page()
        for level, heading in outline.get(n, ()):
            builder.heading(level, heading)
        for paragraph in re.split(r"\n\s*\n", text):
            builder.paragraph(paragraph)
    return builder.build(title, tuple(notes))


def _clean(text: str) -> str:
    text = _HYPHEN_BREAK.sub(r"\1", text.replace("\r\n", "\n").replace("\r", "\n"))
    return "\n".join(_SPACES.sub(" ", line).strip() for line in text.split("\n"))


def _title(reader: Any) -> str | None:
    try:
        title = reader.metadata.title if reader.metadata is not None else None
    except Exception:  # a damaged info dictionary: no title
        return None
    title = " ".join(str(title or "").split())
    return title if title.lower() not in ("", "untitled") else None  # "untitled": some writers' default


def _outline(reader: Any) -> dict[int, list[tuple[int, str]]]:
    """Page (from 0) -> the (level, title) of the outline entries pointing at it, in outline order."""
    try:
        items = reader.outline
    except Exception:  # a damaged outline: no headings, the text is still read
        return {}
    found: dict[int, list[tuple[int, str]]] = {}
    # Depth first, in outline order; a list right after an entry holds that entry's children.
    stack: list[tuple[Any, int]] = [(iter(items), 1)]
    seen = 0
    while stack and seen < MAX_OUTLINE_ENTRIES:
        entries, level = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
        elif isinstance(entry, list):
            stack.append((iter(entry), level + 1))
        else:
            seen += 1
            try:
                page = reader.get_destination_page_number(entry)
                title = " ".join(str(entry.title).split())
            except Exception:  # an entry pointing nowhere: skipped
                continue
            if page is not None and page >= 0 and title:
                found.setdefault(page, []).append((level, title))
    return found


def _describe(e: BaseException) -> str:
    message = " ".join(str(e).split())[:160]
    return f"{type(e).__name__}: {message}" if message else type(e).__name__
