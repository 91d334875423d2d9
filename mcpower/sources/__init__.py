"""Sources other than a folder on disk: a documentation site crawled by its URL, a git repository.

Fetching is another source beside the folder walk, ending in the same documents: a crawl writes
each page it fetches into a mirror folder in mcpower's cache (with a sidecar keeping each page's
URL and validators), a git repository is cloned into the cache; then the ordinary folder ingest
runs on that folder (discover, the isolated readers, incremental assembly, atomic publish). So an
unchanged page is carried over without being embedded, a page gone from the site is removed from
the dataset, and nothing fetched reaches a reader by another path.

    urls.py      URL normalisation, the crawl's scope, and the page <-> mirror path mapping
    citation.py  the URL a result cites: a page's URL, a file's link at its commit on a known host
    guard.py     which addresses a crawl may connect to (no public -> private), checked at connect
    http.py      one bounded GET: conditional headers, redirects within scope, size, time, decoding
    robots.py    robots.txt (RFC 9309, protego): allowed paths, Crawl-delay, sitemaps
    seeds.py     sitemap.xml and llms.txt: pages to start from
    links.py     links and the canonical URL of an HTML page
    mirror.py    the mirror folder and its sidecar, written atomically, under a lock
    crawl.py     the crawler: a few requests in flight, politeness, page and time limits, the report
    git.py       shallow clones and fetches with hooks, prompts and protocols locked down
    remote.py    fetch, then ingest the folder: what `mcpower ingest URL` and a refresh run

This module stays light (the cold search path imports citation.py through the results).
"""

from __future__ import annotations

import re

__all__ = ["kind_of"]

_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)[^\s]+$")  # git@host:path


def kind_of(spec: str, git: bool = False) -> str | None:
    """What ``spec`` names: "web" (an http(s) URL), "git" (a repository address), or None (a folder).

    A repository is an address ending in ``.git`` (``https://``, ``http://``, ``file://``), any
    ``ssh://`` or ``git+ssh://`` address, or scp-like ``user@host:path``; ``git`` says an http(s)
    or file URL names a repository even without ``.git``.
    """
    lower = spec.lower()
    if _SCP_LIKE.match(spec) or lower.startswith(("ssh://", "git+ssh://")):
        return "git"
    if lower.startswith(("http://", "https://", "file://")):
        if git or lower.split("?")[0].rstrip("/").endswith(".git") or lower.startswith("file://"):
            return "git"
        return "web"
    return None
