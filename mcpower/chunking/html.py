"""HTML (.html, .htm), parsed with lxml (libxml2): the page's main content as text.

- content: the first ``<main>`` (or ``[role=main]``), else the first ``<article>``, else ``<body>``;
- dropped: navigation, asides, scripts, styles, forms, iframes, SVG, dialogs, hidden elements,
  elements whose role is navigation, banner, contentinfo, search, dialog or complementary, and
  cookie and consent banners (an id or class naming cookie, consent or gdpr); ``<header>`` and
  ``<footer>`` are page chrome under ``<body>`` but kept inside ``<main>``/``<article>`` (an
  article's header holds its title);
- page furniture of generated sites (Sphinx, MkDocs, rustdoc, Node's docs): buttons (``<button>``,
  ``role=button``), permalink markers (a link to ``#...`` whose text is one or two symbols, such as
  ``¶``, ``§``, ``#``), links that run script (``javascript:``), links that only say "Skip to
  content", "Edit on GitHub", "Edit this page", "Copy" ..., and elements whose id or class names
  copy, clipboard, skip, edit-this/edit-page, headerlink or permalink; also inside headings, code
  and tables;
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
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "dialog", "complementary", "button"})
_BANNER = re.compile(r"cookie|consent|gdpr", re.I)
# Ids and class names of furniture, matched where a word starts ("copybtn", "md-skip", "edit-this-page").
_FURNITURE = re.compile(
    r"(?:^|[\s_-])(?:copy(?!right)|clipboard|headerlink|permalink|skip(?!ped)|edit-?(?:this|page|link|on))", re.I
)
# What a link that is page furniture says, all of it.
_FURNITURE_LINKS = frozenset(
    {"skip to content", "skip to main content", "skip navigation", "edit on github", "edit on gitlab"}
    | {"edit this page", "view page source", "show source", "copy", "copy to clipboard", "copy link"}
)
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


def _furniture_link(el: Any) -> bool:
    """A permalink marker (``<a href="#id">¶</a>``), a link that runs script, or one that only says
    what page furniture says."""
    href = (el.get("href") or "").strip()
    if href.lower().startswith("javascript:"):
        return True
    text = " ".join(el.text_content().split())
    if href.startswith("#") and len(text) <= 2 and not any(c.isalnum() for c in text):
        return True
    return text.lower() in _FURNITURE_LINKS


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
        names = f"{el.get('id', '')} {el.get('class', '')}"
        if _BANNER.search(names) or _FURNITURE.search(names):
            return True
        return tag == "a" and _furniture_link(el)

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
            self.heading(_HEADINGS[tag], self.text_of(el))
        elif tag == "pre":
            self.code(self.text_of(el))
        else:
            rows = [
                [" ".join(self.text_of(cell, " ").split()) for cell in tr if cell.tag in ("td", "th")]
                for tr in el.iter("tr")
            ]
            self.table(rows)

    def text_of(self, root: Any, between: str = "") -> str:
        """The text of ``root`` less its dropped elements (a permalink in a heading, a copy button in
        a code block); ``between`` goes between elements."""
        import lxml.etree

        out: list[str] = []
        skip = 0
        for event, el in lxml.etree.iterwalk(root, events=("start", "end")):
            if event == "start":
                if skip or (el is not root and (not isinstance(el.tag, str) or self.dropped(el, el.tag.lower()))):
                    skip += 1
                else:
                    out.append(el.text or "")
                continue
            if skip:
                skip -= 1
                if skip:
                    continue
            if el is not root:
                out.append(between + (el.tail or ""))
        return "".join(out)
