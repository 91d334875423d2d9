"""robots.txt, as RFC 9309 says a crawler reads it, parsed by protego.

- Fetched once per crawl from the site's root, following redirects on the same host (http to
  https included).
- Its first 500 KiB are parsed (the RFC's floor, and Google's limit); the rest is ignored, and the
  report says so. A 10 MB file costs 500 KiB.
- 2xx: its rules for ``mcpower``'s group, else ``*``'s. 4xx (no file, or forbidden): everything
  is allowed. 5xx, a timeout or an unreachable site: the RFC says assume complete disallow, so
  nothing is crawled and the error says so.
- ``Crawl-delay`` (not in the RFC, widely used) spaces the crawl's requests, at most
  :data:`MAX_CRAWL_DELAY` seconds apart; ``Sitemap:`` lines give sitemaps (seeds.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mcpower.sources.http import ROBOTS_AGENT, Client, FetchError

MAX_ROBOTS_BYTES = 500 * 1024
# A longer delay is honoured as this long: a site asking for a day between requests still gets a
# polite crawl, bounded by the crawl's time limit.
MAX_CRAWL_DELAY = 30.0


class RobotsUnavailableError(Exception):
    """robots.txt could not be fetched for a reason that means "crawl nothing" (RFC 9309 2.3.1.4)."""


@dataclass
class Robots:
    """The rules that apply to mcpower on one site."""

    parser: Any = None  # a protego.Protego, or None: everything allowed
    delay: float = 0.0
    sitemaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def allows(self, url: str) -> bool:
        return self.parser is None or bool(self.parser.can_fetch(url, ROBOTS_AGENT))


async def fetch_robots(client: Client, origin: str) -> Robots:
    """The site's robots.txt rules for mcpower.

    Raises:
        RobotsUnavailableError: a server error or no answer (the crawl must not go on).
    """
    url = origin + "/robots.txt"
    host = urlsplit(origin).hostname
    try:
        fetched = await client.get(
            url,
            in_scope=lambda u: urlsplit(u).hostname == host,  # http -> https of the same site, say
            max_bytes=MAX_ROBOTS_BYTES,
            accept="text/plain",
            truncate=True,
        )
    except FetchError as e:
        raise RobotsUnavailableError(f"{url}: {e}") from None
    if 400 <= fetched.status < 500:
        return Robots(notes=[f"robots.txt: HTTP {fetched.status}, so every page is allowed"])
    if fetched.status != 200:
        raise RobotsUnavailableError(f"{url}: HTTP {fetched.status}")
    notes = []
    if fetched.truncated:
        notes.append(
            f"robots.txt is over {MAX_ROBOTS_BYTES // 1024} KiB: only its first {MAX_ROBOTS_BYTES // 1024} KiB read"
        )
    from protego import Protego

    text = fetched.body.decode("utf-8", "replace")
    parser = Protego.parse(text)
    delay = parser.crawl_delay(ROBOTS_AGENT) or 0.0
    if delay > MAX_CRAWL_DELAY:
        notes.append(f"robots.txt asks for {delay:g} s between requests: waiting {MAX_CRAWL_DELAY:g} s")
    return Robots(parser, min(float(delay), MAX_CRAWL_DELAY), list(parser.sitemaps)[:50], notes)
