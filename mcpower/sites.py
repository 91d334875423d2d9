"""Built documentation sites: recognising one by its generator's own markers, and which of its files
are site furniture rather than pages.

A generator leaves marker files at the root of what it builds (Sphinx: ``searchindex.js`` beside
``_static/``; MkDocs: ``search/search_index.json`` beside ``sitemap.xml`` or ``assets/``; rustdoc:
``search-index*.js`` or ``static.files/``; Javadoc: ``element-list`` or ``package-list`` beside
``allclasses*.html``; Doxygen: ``doxygen.css``). Under such a root, each page is read once and the
rest is furniture: copies of the pages' sources, the index, search and module-index pages, source
code views and static assets. Discovery leaves furniture out and reports it (``--keep-site-files``
keeps it).

Rendered page or source? The rendered page: Sphinx's ``_sources/*.rst.txt`` hold the reST a page
was built from, so a page whose text comes from autodoc (``.. autoclass::``: the whole API
reference) is a handful of directives there and complete only in the HTML, and a result's path
then names the page a reader opens. A source copy whose page is not in the folder is the only copy
of that page, and is kept.

Markers only ever leave files out, never bring any in: a folder that fakes them hides its own
files from its own dataset, nothing more.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

FURNITURE = "site furniture: "  # how a skip reason for furniture begins
KEEP_HINT = "--keep-site-files keeps them"


@dataclass(frozen=True)
class _Generator:
    name: str
    markers: Callable[[Path], bool]  # whether a folder is the root of a site it built
    furniture: tuple[tuple[str, str], ...]  # (glob relative to the site root, what it is)


def _any(folder: Path, *globs: str) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(fnmatch.filter(names, g) for g in globs)


def _file(folder: Path, name: str) -> bool:
    return os.path.isfile(folder / name)


def _dir(folder: Path, name: str) -> bool:
    return os.path.isdir(folder / name)


_INDEX = "index, search or module-index page"
_STATIC = "static asset"
_SOURCE_VIEW = "source code view"

# Globs are matched against the path relative to the site root ('*' crosses no '/'; a trailing
# '/**' takes a whole folder).
GENERATORS: tuple[_Generator, ...] = (
    _Generator(
        "Sphinx",
        lambda d: _file(d, "searchindex.js") and (_dir(d, "_static") or _dir(d, "_sources")),
        (
            ("_sources/**", "copy of a page's source"),
            ("_static/**", _STATIC),
            ("_modules/**", _SOURCE_VIEW),
            ("genindex.html", _INDEX),
            ("genindex-*.html", _INDEX),
            ("search.html", _INDEX),
            ("*-modindex.html", _INDEX),  # py-modindex, np-modindex ...
            ("404.html", _INDEX),
        ),
    ),
    _Generator(
        "MkDocs",
        lambda d: _file(d / "search", "search_index.json") and (_file(d, "sitemap.xml") or _dir(d, "assets")),
        (
            ("search/**", _INDEX),
            ("assets/**", _STATIC),
            ("search.html", _INDEX),
            ("404.html", _INDEX),
        ),
    ),
    _Generator(
        "rustdoc",
        lambda d: _any(d, "search-index*.js") or (_dir(d, "static.files") and _file(d, "settings.html")),
        (
            ("static.files/**", _STATIC),
            ("src/**", _SOURCE_VIEW),
            ("implementors/**", _STATIC),
            ("trait.impl/**", _STATIC),
            ("type.impl/**", _STATIC),
            ("settings.html", _INDEX),
            ("help.html", _INDEX),
            ("**/all.html", _INDEX),
        ),
    ),
    _Generator(
        "Javadoc",
        lambda d: (_file(d, "element-list") or _file(d, "package-list")) and _any(d, "allclasses*.html"),
        (
            ("allclasses*.html", _INDEX),
            ("allpackages-index.html", _INDEX),
            ("index-all.html", _INDEX),
            ("index-files/**", _INDEX),
            ("overview-tree.html", _INDEX),
            ("overview-frame.html", _INDEX),
            ("**/package-tree.html", _INDEX),
            ("**/package-frame.html", _INDEX),
            ("**/package-use.html", _INDEX),
            ("**/class-use/**", _INDEX),
            ("deprecated-list.html", _INDEX),
            ("help-doc.html", _INDEX),
            ("search.html", _INDEX),
            ("legal/**", _STATIC),
            ("resources/**", _STATIC),
            ("script-dir/**", _STATIC),
            ("jquery/**", _STATIC),
        ),
    ),
    _Generator(
        "Doxygen",
        lambda d: _file(d, "doxygen.css"),
        (
            ("search/**", _INDEX),
            ("*_source.html", _SOURCE_VIEW),
            ("*-members.html", _INDEX),
            ("files.html", _INDEX),
            ("annotated.html", _INDEX),
            ("classes.html", _INDEX),
            ("hierarchy.html", _INDEX),
            ("globals*.html", _INDEX),
            ("functions*.html", _INDEX),
            ("namespacemembers*.html", _INDEX),
            ("graph_legend.html", _INDEX),
        ),
    ),
)


@functools.cache
def _pattern(glob: str) -> re.Pattern[str]:
    """A glob as a regex over '/'-separated paths: '*' and '?' stay within a name, '**/' is any
    number of folders, a trailing '/**' everything under a folder."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out))


class Sites:
    """The built sites under a folder, found from the folders its files are in (each looked at once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[str, _Generator | None] = {}

    def _site_of_dir(self, rel_dir: str) -> _Generator | None:
        if rel_dir not in self._seen:
            folder = self.root / rel_dir if rel_dir else self.root
            self._seen[rel_dir] = next((g for g in GENERATORS if g.markers(folder)), None)
        return self._seen[rel_dir]

    def furniture(self, rel: str) -> str | None:
        """Why the file ``rel`` is site furniture ('Sphinx static asset'), or None: it is a page,
        or not in a built site. The innermost site root above it decides."""
        parts = rel.split("/")
        for depth in range(len(parts) - 1, -1, -1):
            base = "/".join(parts[:depth])
            gen = self._site_of_dir(base)
            if gen is None:
                continue
            inside = "/".join(parts[depth:])
            for glob, what in gen.furniture:
                if _pattern(glob).fullmatch(inside):
                    if what == "copy of a page's source" and not self._page_exists(base, inside):
                        return None  # the only copy of its page
                    return f"{gen.name} {what}"
            return None
        return None

    def _page_exists(self, base: str, inside: str) -> bool:
        # _sources/a/b.rst.txt (or b.txt in old builds) is the source of a/b.html
        page = PurePosixPath(base, inside.split("/", 1)[1].removesuffix(".txt")).with_suffix(".html")
        return os.path.isfile(self.root / page)


def furniture_reason(what: str) -> str:
    """The skip reason the ingest report shows for furniture of kind ``what``."""
    return FURNITURE + what


def is_furniture(reason: str) -> bool:
    return reason.startswith(FURNITURE)


def furniture_counts(skipped: Iterable[tuple[str, str]]) -> dict[str, int]:
    """How many files of each kind of furniture were skipped ('Sphinx static asset': 12), in the
    order first met."""
    counts: dict[str, int] = {}
    for _, reason in skipped:
        if is_furniture(reason):
            kind = reason[len(FURNITURE) :]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def site_furniture(root: Path, rels: Iterable[str]) -> dict[str, str]:
    """Which of ``rels`` (paths relative to ``root``) are site furniture, each with the skip reason
    the ingest report shows ('site furniture: Sphinx static asset (...)'); pages and files outside
    any built site are not in it (module docstring)."""
    sites = Sites(root)
    found = {}
    for rel in rels:
        what = sites.furniture(rel)
        if what is not None:
            found[rel] = furniture_reason(what)
    return found
