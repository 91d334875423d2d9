"""Pages to start a crawl from, besides its start URL: the site's sitemaps and its llms.txt.

Sitemaps are the ``Sitemap:`` lines of robots.txt on the same site, ``sitemap.xml`` in the scope's
folder and at the site's root; a sitemap index is followed one level down. llms.txt (the
llmstxt.org convention: a Markdown list of a site's pages for language models) is looked for in
the scope's folder and at the root. Only URLs in the crawl's scope are kept. Each file is read
within bounds (size, count of URLs, files followed), parsed without DTDs or entities
(defusedxml), and a gzipped sitemap is inflated within the same bound.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from mcpower.sources.http import Client, FetchError
from mcpower.sources.links import markdown_links
from mcpower.sources.urls import Scope, join

MAX_SITEMAP_BYTES = 10 * 1024 * 1024  # the sitemaps protocol allows 50 MB; docs sites' are far smaller
MAX_SITEMAPS = 20  # sitemap files read per crawl (an index's children included)
MAX_LLMS_BYTES = 1024 * 1024
_LOC = re.compile(r"\{[^}]*\}loc$|^loc$")


@dataclass
class Seeds:
    urls: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # the sitemap and llms.txt files read


async def find_seeds(
    client: Client, scope: Scope, robot_sitemaps: list[str], allows: Callable[[str], bool], limit: int
) -> Seeds:
    """In-scope page URLs from the site's sitemaps and llms.txt, at most ``limit`` of them."""
    seeds = Seeds()

    def same_site(u: str) -> bool:
        return u.startswith(scope.origin + "/")

    queue = [u for u in robot_sitemaps if same_site(u)]
    queue += [scope.root + "sitemap.xml", scope.origin + "/sitemap.xml"]
    seen: set[str] = set()
    read = 0
    while queue and read < MAX_SITEMAPS and len(seeds.urls) < limit:
        url = queue.pop(0)
        if url in seen or not allows(url):
            continue
        seen.add(url)
        body = await _get(client, url, MAX_SITEMAP_BYTES, same_site, seeds)
        if body is None:
            continue
        read += 1
        locs, is_index = _sitemap_locs(body, url, seeds)
        if locs or is_index:
            seeds.found.append(url)
        for loc in locs:
            target = join(url, loc)
            if target is None:
                continue
            if is_index:
                if same_site(target):
                    queue.append(target)
            elif scope.contains(target) and target not in seeds.urls:
                seeds.urls.append(target)
    for url in dict.fromkeys([scope.root + "llms.txt", scope.origin + "/llms.txt"]):
        if len(seeds.urls) >= limit or not allows(url):
            break
        body = await _get(client, url, MAX_LLMS_BYTES, same_site, seeds)
        if body is None:
            continue
        seeds.found.append(url)
        for target in markdown_links(body, url).links:
            if scope.contains(target) and target not in seeds.urls:
                seeds.urls.append(target)
        break
    del seeds.urls[limit:]
    return seeds


async def _get(
    client: Client, url: str, max_bytes: int, same_site: Callable[[str], bool], seeds: Seeds
) -> bytes | None:
    try:
        fetched = await client.get(url, in_scope=same_site, max_bytes=max_bytes)
    except FetchError as e:
        seeds.notes.append(f"{url}: {e}")
        return None
    return fetched.body if fetched.status == 200 else None


def _sitemap_locs(body: bytes, url: str, seeds: Seeds) -> tuple[list[str], bool]:
    """The <loc> URLs of a sitemap (gzipped or not), and whether it is a sitemap index."""
    if body[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = inflater.decompress(body, MAX_SITEMAP_BYTES + 1)
        except (zlib.error, gzip.BadGzipFile):
            seeds.notes.append(f"{url}: a damaged gzip file")
            return [], False
        if len(body) > MAX_SITEMAP_BYTES:
            seeds.notes.append(f"{url}: over {MAX_SITEMAP_BYTES // 2**20} MB once inflated, not read")
            return [], False
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import fromstring

    try:
        root = fromstring(body)
    except (DefusedXmlException, SyntaxError, ValueError) as e:
        seeds.notes.append(f"{url}: not a sitemap ({type(e).__name__})")
        return [], False
    is_index = root.tag.endswith("sitemapindex")
    locs = [(el.text or "").strip() for el in root.iter() if isinstance(el.tag, str) and _LOC.search(el.tag)]
    return [loc for loc in locs if loc], is_index
