"""Dataset text made safe to show: invisible and direction-changing characters shown as what they
are, and a query's words marked in a snippet.

Everything here returns :class:`markupsafe.Markup` built from escaped pieces, so a template never
needs ``|safe`` on text that came from a dataset. Document text, titles and paths are hostile: a
right-to-left override in a path could make ``evil.exe‮fdp.md`` read as another file, and a
zero-width space could make two different names look the same. Each such character is shown as a
visible ``⟨U+202E⟩`` mark (and the whole value is isolated by the template with ``<bdi>``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from markupsafe import Markup, escape

from mcpower.terms import query_terms

# Bidirectional embeddings, overrides, isolates and marks; zero-width and other invisible format
# characters; C0/C1 controls other than tab and newline. Shown, never applied.
_HIDDEN = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]"
)


def _mark(ch: str) -> str:
    return f'<span class="cc" title="hidden character U+{ord(ch):04X}">\u27e8U+{ord(ch):04X}\u27e9</span>'


def visible(text: object) -> Markup:
    """``text`` escaped, each hidden or direction-changing character replaced by a visible mark."""
    escaped = str(escape("" if text is None else str(text)))
    return Markup(_HIDDEN.sub(lambda m: _mark(m.group(0)), escaped))


def has_hidden(text: str) -> bool:
    """Whether ``text`` holds a character :func:`visible` would mark."""
    return _HIDDEN.search(text) is not None


def highlight(text: object, query: str) -> Markup:
    """``text`` as :func:`visible` shows it, with the query's words (as search counts them) in ``<mark>``."""
    raw = "" if text is None else str(text)
    terms = sorted(set(query_terms(query)), key=len, reverse=True)
    if not terms or not raw:
        return visible(raw)
    pattern = re.compile("|".join(_term_pattern(t) for t in terms), re.IGNORECASE)
    out: list[str] = []
    last = 0
    for m in pattern.finditer(raw):
        if m.start() == m.end():
            continue
        out.append(visible(raw[last : m.start()]))
        out.append(f"<mark>{visible(m.group(0))}</mark>")
        last = m.end()
    out.append(visible(raw[last:]))
    return Markup("".join(out))


def _term_pattern(term: str) -> str:
    word = re.escape(term)
    # Whole words for alphabetic terms (as the keyword index matches them); CJK terms anywhere.
    return word if not term[:1].isalnum() or not term.isascii() else rf"(?<![^\W_]){word}(?![^\W_])"


def mark_lines(lines: Iterable[str]) -> list[Markup]:
    """Each line as :func:`visible` shows it."""
    return [visible(line) for line in lines]
