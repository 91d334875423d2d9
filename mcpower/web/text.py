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

from markupsafe import Markup, escape

from mcpower.analysis import marks
from mcpower.ranking import best_snippet
from mcpower.terms import query_terms

# Bidirectional embeddings, overrides, isolates and marks; zero-width and other invisible format
# characters; C0/C1 controls other than tab and newline. Shown, never applied.
_HIDDEN = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]"
)


# Marks shown in one value; hidden characters past them are dropped and counted, so a text made of
# zero-width characters cannot swell a page (each mark takes ~40 bytes of HTML).
MAX_MARKS = 24


def _mark(label: str) -> str:
    return f'<span class="cc">\u27e8{label}\u27e9</span>'


def visible(text: object) -> Markup:
    """``text`` escaped, each hidden or direction-changing character replaced by a visible mark
    (past :data:`MAX_MARKS`, dropped and counted in one last mark)."""
    escaped = str(escape("" if text is None else str(text)))
    marks = 0

    def replace(m: re.Match[str]) -> str:
        nonlocal marks
        marks += 1
        return _mark(f"U+{ord(m.group(0)):04X}") if marks <= MAX_MARKS else ""

    shown = _HIDDEN.sub(replace, escaped)
    if marks > MAX_MARKS:
        shown += _mark(f"{marks - MAX_MARKS:,} more hidden characters removed")
    return Markup(shown)


def plain(text: object, limit: int = 80) -> str:
    """``text`` for places that hold no markup (a page's ``<title>``): at most ``limit`` characters,
    hidden characters written as ``⟨U+202E⟩`` (autoescape escapes the rest)."""
    raw = "" if text is None else str(text)
    cut = raw[:limit] + ("…" if len(raw) > limit else "")
    return _HIDDEN.sub(lambda m: f"\u27e8U+{ord(m.group(0)):04X}\u27e9", cut)


def highlight(text: object, query: str, languages: list[str] | None = None) -> Markup:
    """``text`` as :func:`visible` shows it, with the query's words (as search counts them) in ``<mark>``.

    ``languages``: the result's dataset's (mcpower.analysis): its words whole, their stems as word
    beginnings ("Pakete" marked for "Paket"), CJK character pairs anywhere (overlapping pairs make
    one mark: 硬链 and 链接 mark 硬链接); None: the words of a dataset indexed before analysis.
    """
    raw = "" if text is None else str(text)
    pairs: tuple[str, ...] = ()
    if languages is None:
        patterns = [_term_pattern(t) for t in sorted(set(query_terms(query)), key=len, reverse=True)]
    else:
        found = marks(query, languages)
        pairs = found.pairs
        patterns = [
            *(rf"(?<![^\W_]){re.escape(w)}(?![^\W_])" for w in sorted(found.words, key=len, reverse=True)),
            *(rf"(?<![^\W_]){re.escape(s)}[^\W_]*" for s in sorted(found.stems, key=len, reverse=True)),
        ]
    if not (patterns or pairs) or not raw:
        return visible(raw)
    marked = [False] * len(raw)
    if patterns:
        for m in re.finditer("|".join(patterns), raw, re.IGNORECASE):
            marked[m.start() : m.end()] = [True] * (m.end() - m.start())
    lower = raw.lower()
    for pair in pairs:
        at = lower.find(pair)
        while at >= 0:
            marked[at : at + len(pair)] = [True] * len(pair)
            at = lower.find(pair, at + 1)
    out: list[str] = []
    start = 0
    for end in range(1, len(raw) + 1):
        if end == len(raw) or marked[end] != marked[start]:
            piece = visible(raw[start:end])
            out.append(f"<mark>{piece}</mark>" if marked[start] else str(piece))
            start = end
    return Markup("".join(out))


# Markdown as it reaches a result: fences, heading marks and attribute blocks, emphasis, links,
# table rules and pipes, and inline HTML tags. Taken out for reading; the words stay.
_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,}).*$\n?", re.M)
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)
_ATTRIBUTES = re.compile(r"[ \t]*\{[ \t]*[#.][^}\n]*\}[ \t]*$", re.M)
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$\n?", re.M)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|`)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")  # *word*, not 2*3*4
# Lines of site-generator syntax, not prose: pymdownx blocks (`/// tip`, `///`), MkDocs snippet
# includes (`{* ../src/app.py hl[3] *}`, `--8<-- "file"`).
_DIRECTIVE = re.compile(r"^[ \t]*(?:/{3}.*|\{\*.*\*\}|-{2}8<-{2}.*)[ \t]*$\n?", re.M)
_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
_BLANKS = re.compile(r"\n{3,}")


def readable(text: object) -> str:
    """Markdown ``text`` as words to read: no fences, ``#`` marks, ``{ #id }`` attribute blocks,
    ``**``, backticks, link targets, table rules or HTML tags; a table's cells separated by `` · ``.
    Plain text (escaped later by :func:`visible`), so no markup from a document reaches a page."""
    raw = "" if text is None else str(text)
    raw = _ATTRIBUTES.sub("", raw)
    raw = _FENCE.sub("", raw)
    raw = _DIRECTIVE.sub("", raw)
    raw = _HEADING.sub(r"\1", raw)
    raw = _TABLE_RULE.sub("", raw)
    raw = "\n".join(_cells(line) if line.lstrip().startswith("|") else line for line in raw.split("\n"))
    raw = _IMAGE_OR_LINK.sub(r"\1", raw)
    raw = _EMPHASIS.sub(r"\2", raw)
    raw = _ITALIC.sub(r"\1", raw)
    raw = _TAG.sub("", raw)
    return _BLANKS.sub("\n\n", raw).strip()


def _cells(line: str) -> str:
    return " · ".join(cell.strip() for cell in line.strip().strip("|").split("|") if cell.strip())


def excerpt(text: object, query: str, chars: int = 320) -> str:
    """The part of :func:`readable` ``text`` (at most ``chars``) holding most of the query's words."""
    return best_snippet(readable(text), query_terms(query), chars)


def web_url(url: object) -> str | None:
    """``url`` if it is an http(s) address a page may link to (a result's ``url``), else None: a
    ``javascript:`` or ``data:`` address from a crawled page is never made a link."""
    text = "" if url is None else str(url)
    if len(text) > 2048 or _HIDDEN.search(text) or any(c.isspace() for c in text):
        return None
    return text if re.match(r"https?://[^/?#\s]", text, re.I) else None


def _term_pattern(term: str) -> str:
    word = re.escape(term)
    # Whole words for alphabetic terms (as the keyword index matches them); CJK terms anywhere.
    return word if not term[:1].isalnum() or not term.isascii() else rf"(?<![^\W_]){word}(?![^\W_])"
