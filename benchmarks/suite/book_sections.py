"""The sections of a translated book's HTML pages, and the section a search result is in.

The judged sets of benchmarks/languages.py judge *sections* (``pkgs#uploading-a-package``), named
the same way in every language: Debian's translated books are built from one source (Sphinx or
DocBook), so a section keeps its anchor id in every translation. A page is parsed here once, with
lxml, independently of mcpower's own HTML reader (the stick does not lean on what it measures):

- every heading (h1-h6) of the page's main content, in order, with the heading path a reader that
  nests headings by level gives it (``Chapter 4 > 4.1. control > Note``), as mcpower's chunker does;
- the section each heading belongs to: the nearest enclosing section element (Sphinx ``<section
  id>``; DocBook ``<div class="section|chapter|...">``, whose id is the anchor in its title), so a
  "Note" heading inside section 4.4.1 belongs to ``targets``, whatever path the level nesting gives it;
- each section's parent section (for judgments on a section that cover its sub-sections).

A result is mapped to its section through the text mcpower stored for its document: that text
writes headings as Markdown heading lines (``## 4.1. control``), so each of the result's lines lies
under a heading path, which is looked up among the page's paths (titles compared by their letters
and digits only, case folded: numbering, permalink marks and spacing do not matter). The result is
in the section holding most of its lines. Where the stored text has no heading line for the
result, its own heading path is looked up instead (exactly, else its deepest known prefix).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Container classes of DocBook's HTML output that are sections; the id is its title's anchor.
_DOCBOOK_SECTIONS = frozenset(
    {"section", "chapter", "appendix", "preface", "article", "book", "part", "glossary", "bibliography"}
    | {"sect1", "sect2", "sect3", "sect4", "sect5", "simplesect", "refentry", "qandaset", "qandadiv", "index"}
)
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
# Elements whose headings a reader of the main content does not see (mcpower drops them too).
_CHROME = frozenset({"nav", "aside", "script", "style", "noscript", "form", "template", "header", "footer", "head"})
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_MD_HEADING = re.compile(r"^(#{1,6}) (.*)$")


def norm_title(text: str) -> str:
    """A heading's letters and digits, case folded: what two renderings of one title share."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


@dataclass
class PageSections:
    """The sections of one page: heading paths to section keys, parents, titles."""

    page: str
    top: str  # the key of the page's first section (text before any heading belongs to it)
    by_path: dict[tuple[str, ...], str] = field(default_factory=dict)  # normalised heading path -> key
    parent: dict[str, str | None] = field(default_factory=dict)
    title: dict[str, str] = field(default_factory=dict)  # key -> its heading as written
    order: list[str] = field(default_factory=list)  # keys in page order
    ambiguous: int = 0  # heading paths that lead to two sections (the first is kept)

    def lookup(self, path: tuple[str, ...]) -> tuple[str, bool]:
        """The section of a normalised heading path, and whether the path matched exactly (else its
        deepest known prefix, else a unique known path ending the same way, else the page top)."""
        if not path:
            return self.top, True
        if path in self.by_path:
            return self.by_path[path], True
        ends = {key for known, key in self.by_path.items() if known[-1:] == path[-1:]}
        if len(ends) == 1:
            return ends.pop(), False
        for n in range(len(path) - 1, 0, -1):
            if path[:n] in self.by_path:
                return self.by_path[path[:n]], False
        return self.top, False

    def ancestors(self, key: str) -> list[str]:
        """``key`` and its enclosing sections, innermost first."""
        out: list[str] = []
        cur: str | None = key
        while cur is not None and cur not in out:
            out.append(cur)
            cur = self.parent.get(cur)
        return out


def _classes(el: Any) -> set[str]:
    return set((el.get("class") or "").split())


def _heading_anchor(heading: Any) -> str | None:
    """A DocBook title's anchor (``<a id>`` / ``<a name>`` inside it) or the heading's own id."""
    for a in heading.iter("a"):
        if a.get("id") or a.get("name"):
            return str(a.get("id") or a.get("name"))
    own = heading.get("id")
    return str(own) if own else None


def _container_id(el: Any) -> str | None:
    """The section id of an element that is a section, else None."""
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag == "section" and el.get("id"):
        return str(el.get("id"))
    if tag == "div" and _classes(el) & _DOCBOOK_SECTIONS:
        if el.get("id"):
            return str(el.get("id"))
        first = next(el.iter(*_HEADINGS), None)  # its title, the first heading inside: found without a walk of it all
        return _heading_anchor(first) if first is not None else None
    if tag == "div" and "section" in _classes(el) and el.get("id"):
        return str(el.get("id"))  # Sphinx before 4
    return None


def _enclosing(el: Any, stop: Any) -> list[str]:
    """Section ids of the sections around ``el`` (itself included), innermost first."""
    out: list[str] = []
    cur = el
    while cur is not None:
        found = _container_id(cur)
        if found and found not in out:
            out.append(found)
        if cur is stop:
            break
        cur = cur.getparent()
    return out


def parse_page(data: bytes, page: str) -> PageSections:
    """The sections of one HTML page (``page`` prefixes every key: ``page#id``)."""
    import lxml.html

    try:
        data.decode("utf-8")
        encoding: str | None = "utf-8"
    except UnicodeDecodeError:
        encoding = None
    doc = lxml.html.document_fromstring(data, parser=lxml.html.HTMLParser(encoding=encoding, remove_comments=True))
    found = doc.xpath("(//main | //*[@role='main'])[1]") or doc.xpath("(//article)[1]")
    root = found[0] if found else (doc.find("body") if doc.find("body") is not None else doc)
    sections = PageSections(page=page, top=page)
    stack: list[tuple[int, str]] = []
    for h in root.iter(*_HEADINGS):
        if any(isinstance(a.tag, str) and a.tag.lower() in _CHROME for a in h.iterancestors()):
            continue
        title = " ".join(h.text_content().split()).rstrip("¶").strip()
        normed = norm_title(title)
        if not normed:
            continue
        level = int(h.tag[1])
        stack = [(lv, t) for lv, t in stack if lv < level] + [(level, normed)]
        ids = _enclosing(h, root)
        key = f"{page}#{ids[0]}" if ids else page
        path = tuple(t for _, t in stack)
        if path in sections.by_path and sections.by_path[path] != key:
            sections.ambiguous += 1
        else:
            sections.by_path.setdefault(path, key)
        if key not in sections.parent:
            sections.parent[key] = f"{page}#{ids[1]}" if len(ids) > 1 else (None if key == page else page)
            sections.title[key] = title
            sections.order.append(key)
    if sections.order:
        sections.top = sections.order[0]
        if page not in sections.parent:  # a page whose first heading is not its top section
            sections.parent = {k: (p if p != page else None) for k, p in sections.parent.items()}
    return sections


def line_sections(content: str, sections: PageSections) -> tuple[list[str], list[bool]]:
    """For each line of a document's stored text (0-based), the section it lies in and whether its
    heading path was known exactly; Markdown heading lines outside code fences open sections."""
    keys: list[str] = []
    exact: list[bool] = []
    fence: str | None = None
    stack: list[tuple[int, str]] = []
    current, known = sections.top, True
    for line in content.split("\n"):
        m = None if fence else _MD_HEADING.match(line)
        f = _FENCE.match(line)
        if fence is not None:
            if (
                f
                and f.group(1)[0] == fence[0]
                and len(f.group(1)) >= len(fence)
                and not line[len(f.group(1)) :].strip()
            ):
                fence = None
        elif f:
            fence = f.group(1)
        elif m:
            normed = norm_title(m.group(2))
            if normed:
                level = len(m.group(1))
                stack = [(lv, t) for lv, t in stack if lv < level] + [(level, normed)]
                current, known = sections.lookup(tuple(t for _, t in stack))
        keys.append(current)
        exact.append(known)
    return keys, exact


def majority(keys: list[str], exact: list[bool], start: int, end: int) -> tuple[str, bool] | None:
    """The section holding most of the 1-based lines ``start``..``end`` (the first on a tie), and
    whether all of those lines were mapped exactly; None when the range is outside the text."""
    lo, hi = max(start - 1, 0), min(end, len(keys))
    if lo >= hi:
        return None
    counts = Counter(keys[lo:hi])
    best = max(counts.values())
    winner = next(k for k in keys[lo:hi] if counts[k] == best)
    return winner, all(exact[lo:hi])


def paragraphs(data: bytes, page: str) -> list[tuple[str, str, bool]]:
    """The prose of a page: one (section, text, is a heading) per paragraph, list item, term, cell or
    heading (code left out)."""
    import lxml.html

    doc = lxml.html.document_fromstring(data, parser=lxml.html.HTMLParser(encoding="utf-8", remove_comments=True))
    found = doc.xpath("(//main | //*[@role='main'])[1]") or doc.xpath("(//article)[1]")
    root = found[0] if found else doc
    out = []
    for el in root.iter("p", "li", "dt", "dd", "td", "th", *_HEADINGS):
        if el.tag in ("li", "dd") and el.find(".//p") is not None:
            continue  # its paragraphs are counted themselves
        if el.tag != "p" and any(isinstance(a.tag, str) and a.tag in ("pre", "p") for a in el.iterancestors()):
            continue
        text = " ".join(el.text_content().split())
        if sum(ch.isalpha() for ch in text) >= 3:
            ids = _enclosing(el, root)
            out.append((f"{page}#{ids[0]}" if ids else page, text, el.tag in _HEADINGS))
    return out
