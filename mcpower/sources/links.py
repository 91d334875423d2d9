"""The links of an HTML page, its canonical URL, and the furniture of the generator that built it.

Parsed by lxml (libxml2, no network, no huge trees) from a page already bounded in size; at most
:data:`MAX_LINKS` links are taken from one page, so a page of 100,000 links costs that many at
most. ``rel="nofollow"`` links are not followed (Sphinx's "Show Source" is one), nor links inside
the page's ``<head>`` other than the canonical one. A ``<base href>`` changes what links resolve
against. When the page says which generator built it (``<meta name="generator">``: Sphinx, MkDocs),
links to that generator's furniture (index, search and module-index pages, source copies, static
assets: as mcpower/sites.py skips in a folder) are left out and counted.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from mcpower.sources.urls import join

MAX_LINKS = 5000  # per page: a docs page's navigation rarely links more than a few hundred pages
# The furniture of generators a page names in <meta name="generator"> (names and folders, as in sites.py).
_FURNITURE = {
    "sphinx": (("genindex*.html", "search.html", "*-modindex.html", "404.html"), ("_sources", "_static", "_modules")),
    "mkdocs": (("search.html", "404.html"), ("search", "assets")),
}


# A Markdown inline link's target: [text](target "title"), <target> allowed.
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


@dataclass
class PageLinks:
    links: list[str] = field(default_factory=list)  # normalised absolute URLs, in page order, no repeats
    canonical: str | None = None
    furniture: int = 0  # links left out as the generator's furniture
    capped: bool = False  # more than MAX_LINKS links
    _held: set[str] = field(default_factory=set, repr=False, compare=False)

    def holds(self, url: str) -> bool:
        return url in self._held

    def add(self, url: str) -> bool:
        """Take ``url`` (not held yet); False, and ``capped`` set, once MAX_LINKS are held."""
        if len(self.links) >= MAX_LINKS:
            self.capped = True
            return False
        self._held.add(url)
        self.links.append(url)
        return True


def page_links(body: bytes, url: str) -> PageLinks:
    """The links of the HTML page ``body`` fetched from ``url`` (module docstring)."""
    from lxml import etree, html

    out = PageLinks()
    if not body.strip():
        return out
    parser = html.HTMLParser(no_network=True, huge_tree=False, remove_comments=True, remove_pis=True)
    try:
        root = html.document_fromstring(body, parser=parser)
    except (etree.ParserError, ValueError):
        return out
    base = url
    generator = ""
    for el in root.iter("base", "meta", "link"):
        if el.tag == "base" and el.get("href"):
            base = join(url, el.get("href") or "") or url
        elif el.tag == "meta" and (el.get("name") or "").lower() == "generator":
            generator = (el.get("content") or "").lower()
        elif el.tag == "link" and "canonical" in (el.get("rel") or "").lower().split():
            out.canonical = join(base, el.get("href") or "")
    names, folders = next((v for k, v in _FURNITURE.items() if generator.startswith(k)), ((), ()))
    hrefs: set[str] = set()
    for el in root.iter("a", "area"):
        href = (el.get("href") or "").split("#")[0]  # a page's links are mostly to places in pages
        if not href or href in hrefs or "nofollow" in (el.get("rel") or "").lower().split():
            continue
        hrefs.add(href)
        target = join(base, href)
        if target is None or out.holds(target):
            continue
        if names and _is_furniture(target, names, folders):
            out.furniture += 1
            continue
        if not out.add(target):
            break
    return out


def _is_furniture(url: str, names: tuple[str, ...], folders: tuple[str, ...]) -> bool:
    path = url.split("?")[0].split("://", 1)[-1]
    segments = path.split("/")[1:]
    return any(s in folders for s in segments[:-1]) or any(fnmatch.fnmatch(segments[-1], g) for g in names)


def markdown_links(body: bytes, url: str) -> PageLinks:
    """The inline links of a Markdown page (a site that serves its Markdown, an llms.txt)."""
    out = PageLinks()
    for href in MARKDOWN_LINK.findall(body.decode("utf-8", "replace")):
        target = join(url, href)
        if target is None or out.holds(target := target.split("#")[0]):
            continue
        if not out.add(target):
            break
    return out
