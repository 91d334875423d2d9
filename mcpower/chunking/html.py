"""HTML (.html, .htm), parsed with lxml (libxml2): the page's main content as text.

- content: the first ``<main>`` (or ``[role=main]``), else the first ``<article>``, else ``<body>``;
- dropped: navigation, asides, scripts, styles, forms, iframes, SVG, dialogs, hidden elements,
  elements whose role is navigation, banner, contentinfo, search, dialog or complementary, and
  cookie and consent banners (an id or class naming cookie, consent or gdpr); ``<header>`` and
  ``<footer>`` are page chrome under ``<body>`` but kept inside ``<main>``/``<article>`` (an
  article's header holds its title);
- h1-h6 give the heading path; ``<pre>`` stays whole; a table becomes one line per row;
- title: ``<title>``, else the first ``<h1>``.

libxml2 stops building the tree at nesting depth 256 (browsers stop at 512): what follows is not
read, and a note says so. The walk over the tree is iterative, never recursive.
"""

from __future__ import annotations

import re
from typing import Any

from mcpower.chunking.extracted import TextBuilder
from mcpower.chunking.sections import Parsed, UnreadableError

TYPES = frozenset({".html", ".htm"})

_DROP_TAGS = frozenset(
    {"nav", "aside", "script", "style", "noscript", "form", "template", "iframe", "svg", "math", "button"}
    | {"select", "object", "embed", "canvas", "dialog", "head"}
)
_CHROME_TAGS = frozenset({"header", "footer"})
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "dialog", "complementary"})
_BANNER = re.compile(r"cookie|consent|gdpr", re.I)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements that end the running paragraph.
_BLOCKS = frozenset(
    {"p", "div", "li", "ul", "ol", "dl", "dt", "dd", "blockquote", "section", "article", "main", "figure"}
    | {"figcaption", "br", "hr", "body", "header", "footer", "details", "summary", "address", "center"}
)


def extract(data: bytes) -> Parsed:
    """The page's main content as text, with its headings.

    Raises:
        UnreadableError: no HTML content at all.
    """
    import lxml.etree
    import lxml.html

    try:
        data.decode("utf-8")
        encoding: str | None = "utf-8"  # a page that is valid UTF-8 is read as UTF-8, whatever its <meta> says
    except UnicodeDecodeError:
        encoding = None  # libxml2 takes the <meta charset>, else Latin-1
    parser = lxml.html.HTMLParser(encoding=encoding, remove_comments=True, remove_pis=True)
    try:
        doc = lxml.html.document_fromstring(data, parser=parser)
    except (lxml.etree.ParserError, ValueError) as e:
        raise UnreadableError(f"no HTML content ({e})") from e
    notes: tuple[str, ...] = ()
    if any("Excessive depth" in e.message for e in parser.error_log):
        notes = ("elements nested deeper than 256 levels: the page was read up to the first of them",)
    title = _text(doc.find(".//title"))
    found = doc.xpath("(//main | //*[@role='main'])[1]") or doc.xpath("(//article)[1]")
    root = found[0] if found else doc.find("body")
    if root is None:
        root = doc
    if not title:
        title = _text(root.find(".//h1"))
    builder = _Walker(root)
    builder.walk()
    return builder.build(title or None, notes)


def _text(el: Any) -> str:
    return " ".join(el.text_content().split()) if el is not None else ""


class _Walker(TextBuilder):
    def __init__(self, root: Any) -> None:
        super().__init__()
        self.root = root
        self.keep_chrome = root.tag != "body"
        self.buffer: list[str] = []

    def flush(self) -> None:
        text = " ".join("".join(self.buffer).split())
        self.buffer.clear()
        if text:
            self.paragraph(text)

    def dropped(self, el: Any, tag: str) -> bool:
        if tag in _DROP_TAGS or (tag in _CHROME_TAGS and not self.keep_chrome):
            return True
        if (el.get("role") or "").lower() in _DROP_ROLES:
            return True
        if el.get("hidden") is not None or (el.get("aria-hidden") or "").lower() == "true":
            return True
        return bool(_BANNER.search(f"{el.get('id', '')} {el.get('class', '')}"))

    def walk(self) -> None:
        import lxml.etree

        skip = 0  # > 0 inside a subtree that is dropped or already taken whole
        for event, el in lxml.etree.iterwalk(self.root, events=("start", "end")):
            tag = el.tag.lower() if isinstance(el.tag, str) else ""
            if event == "start":
                if skip:
                    skip += 1
                elif not tag or self.dropped(el, tag):
                    skip = 1
                elif tag in _HEADINGS or tag in ("pre", "table"):
                    self.flush()
                    self.whole(el, tag)
                    skip = 1
                else:
                    if tag in _BLOCKS:
                        self.flush()
                    self.buffer.append(el.text or "")
                continue
            if skip:
                skip -= 1
                if skip:
                    continue
            elif tag in _BLOCKS:
                self.flush()
            if el is not self.root:
                self.buffer.append(el.tail or "")  # text after an element belongs to its parent
        self.flush()

    def whole(self, el: Any, tag: str) -> None:
        """A heading, a <pre> or a table: read at once."""
        if tag in _HEADINGS:
            self.heading(_HEADINGS[tag], el.text_content())
        elif tag == "pre":
            self.code(el.text_content())
        else:
            rows = [
                [" ".join(" ".join(cell.itertext()).split()) for cell in tr if cell.tag in ("td", "th")]
                for tr in el.iter("tr")
            ]
            self.table(rows)
