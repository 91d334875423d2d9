"""The crawler: the pages under a start URL, fetched into a mirror folder, politely and within bounds.

Order: robots.txt first (nothing is fetched that it forbids, sitemaps and llms.txt included), then
the start URL, the sitemaps' and llms.txt's pages, and the pages the last crawl kept (so a refresh
asks about every page it has, with ``If-None-Match`` / ``If-Modified-Since``), then the links found
on the way, breadth first. ``in_flight`` workers fetch at once (never more requests than that in
flight); ``Crawl-delay`` spaces the requests' starts. A page is:

    200       stored at its mirror path (urls.py) if its bytes changed; its links followed
    304       kept as it is (its links read again from the mirror copy)
    404, 410  gone: removed from the mirror, so the ingest removes it from the dataset
    other     (an error, a timeout, 5xx, 403 ...) a page the mirror has is kept as it was, and
              reported; a new one is skipped with the reason

Bounds: ``max_pages`` pages, ``page_timeout`` per page (redirects and body included, so a server
that streams forever or a byte at a time is cut off), ``total_timeout`` for the whole crawl,
``max_page_bytes`` per page as decoded (PDFs: ten times it, as for files), MAX_LINKS per page
(links.py), MAX_QUEUED URLs waiting. A crawl that ends on its time limit removes nothing it did
not get to look at again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from mcpower.chunking import size_limit
from mcpower.manifest import now_utc
from mcpower.sources.content import as_utf8, content_kind, media_type, suffix_of
from mcpower.sources.http import Client, Fetched, FetchError
from mcpower.sources.links import markdown_links, page_links
from mcpower.sources.mirror import CrawlState, PageState, remove_pages, store_page
from mcpower.sources.robots import Robots, fetch_robots
from mcpower.sources.seeds import find_seeds
from mcpower.sources.urls import Scope, URLError

# A documentation site of one product is a few hundred pages (Python's library reference: ~300;
# FastAPI: 155; Django: ~800): 1,000 takes such a site whole and stops a crawl that has wandered
# into a generated or endless space in minutes, not hours. --max-pages raises it.
DEFAULT_MAX_PAGES = 1000
# A few requests at once: fast enough (a page is mostly waiting on the network), light for the site.
DEFAULT_IN_FLIGHT = 4
DEFAULT_PAGE_TIMEOUT = 30.0
DEFAULT_TOTAL_TIMEOUT = 3600.0
MAX_QUEUED = 100_000  # URLs known and not yet fetched: a bound on memory whatever pages link to
# Requests per page allowed: links that fail (404s, redirects out of scope, types not read) cost
# requests without adding pages; a crawl stops after this many per page of its limit (30 at least).
REQUESTS_PER_PAGE = 3
MIN_REQUESTS = 30
MAX_REPORTED = 1000  # skipped URLs kept for the report (the rest are counted)

ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class CrawlOptions:
    max_pages: int = DEFAULT_MAX_PAGES
    in_flight: int = DEFAULT_IN_FLIGHT
    page_timeout: float = DEFAULT_PAGE_TIMEOUT
    total_timeout: float = DEFAULT_TOTAL_TIMEOUT
    max_page_bytes: int = 10 * 1024 * 1024
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold secrets: never shown


@dataclass
class CrawlReport:
    start: str
    pages: int = 0  # pages the mirror holds after the crawl
    new: int = 0
    changed: int = 0
    unchanged: int = 0  # fetched again (200) with the same bytes
    not_modified: int = 0  # 304 to a conditional request
    removed: list[str] = field(default_factory=list)  # URLs gone (404/410, or no longer in the crawl)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (URL, why): failed now, previous copy kept
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (URL, why)
    skipped_more: int = 0  # skipped beyond MAX_REPORTED
    requests: int = 0
    conditional: int = 0  # requests sent with validators
    furniture: int = 0  # links to a generator's furniture not followed
    seeds: list[str] = field(default_factory=list)  # sitemaps and llms.txt read
    stopped: str | None = None  # "page limit", "request limit", "time limit"
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def skip(self, url: str, why: str) -> None:
        if len(self.skipped) < MAX_REPORTED:
            self.skipped.append((url, why))
        else:
            self.skipped_more += 1


class Crawl:
    """One crawl of ``start`` into the mirror at ``folder`` (its ``pages/`` and ``state.json``)."""

    def __init__(
        self, start: str, folder: Path, options: CrawlOptions, progress: ProgressCallback | None = None
    ) -> None:
        self.scope = Scope.of(start)
        self.folder = folder
        self.root = folder / "pages"
        self.options = options
        self.progress = progress
        self.old = CrawlState.read(folder, self.scope.root)
        self.old_by_url = {p.url: rel for rel, p in self.old.pages.items()}
        self.new = CrawlState(self.scope.root)
        self.report = CrawlReport(self.scope.root)
        self.robots = Robots()
        self.queued: set[str] = set()
        self.reserved = 0  # pages stored or being fetched
        self.done = 0  # pages stored
        self._slots = anyio.Condition()
        self._next_start = 0.0

    async def run(self, client: Client) -> CrawlReport:
        """Crawl, then bring the mirror in line with what was found.

        Raises:
            RobotsUnavailableError: robots.txt answered with a server error, or not at all.
        """
        started = time.monotonic()
        self.client = client
        self.root.mkdir(parents=True, exist_ok=True)
        self.robots = await fetch_robots(client, self.scope.origin)
        self.report.notes += self.robots.notes
        seeds = await find_seeds(
            client, self.scope, self.robots.sitemaps, self.robots.allows, self.options.max_pages * 2
        )
        self.report.seeds, self.report.notes = seeds.found, self.report.notes + seeds.notes[:20]
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        self._send = send
        self._outstanding = 0
        for url in [self.scope.root, *seeds.urls, *self.old_by_url]:
            self._enqueue(url)
        if self._outstanding == 0:
            send.close()
        with anyio.move_on_after(self.options.total_timeout) as limit:
            async with anyio.create_task_group() as tg:
                for _ in range(self.options.in_flight):
                    tg.start_soon(self._worker, receive.clone())
        receive.close()
        if limit.cancelled_caught:
            self.report.stopped = "time limit"
        self._finish()
        self.report.requests = client.requests
        self.report.seconds = time.monotonic() - started
        return self.report

    def _enqueue(self, url: str) -> None:
        if url in self.queued or not self.scope.contains(url):
            return
        if len(self.queued) >= MAX_QUEUED:
            self.report.stopped = self.report.stopped or "page limit"
            return
        self.queued.add(url)
        self._outstanding += 1
        self._send.send_nowait(url)

    async def _worker(self, receive: anyio.abc.ObjectReceiveStream[str]) -> None:
        async with receive:
            async for url in receive:
                try:
                    await self._visit(url)
                finally:
                    self._outstanding -= 1
                    if self._outstanding == 0:
                        self._send.close()

    async def _visit(self, url: str) -> None:
        if not self.robots.allows(url):
            self.report.skip(url, "forbidden by robots.txt")
            return
        if self.client.requests >= max(MIN_REQUESTS, REQUESTS_PER_PAGE * self.options.max_pages):
            self.report.stopped = self.report.stopped or "request limit"
            return
        async with self._slots:  # a page fetched in flight may fail and give its place back: wait for it
            while self.reserved >= self.options.max_pages and self.done < self.options.max_pages:
                await self._slots.wait()
            if self.done >= self.options.max_pages:
                self.report.stopped = "page limit"
                return
            self.reserved += 1
        stored = False
        try:
            stored = await self._fetch(url)
        finally:
            with anyio.CancelScope(shield=True):
                async with self._slots:
                    self.done += stored
                    self.reserved -= not stored
                    self._slots.notify_all()
        if stored and self.progress is not None:
            self.progress("pages", self.done, max(self.done, min(len(self.queued), self.options.max_pages)))

    async def _polite(self) -> None:
        """Wait for this request's turn under Crawl-delay."""
        delay = self.robots.delay
        if delay <= 0:
            return
        now = time.monotonic()
        turn = max(now, self._next_start)
        self._next_start = turn + delay
        await anyio.sleep(turn - now)

    async def _fetch(self, url: str) -> bool:
        """Fetch one page; whether it is in the mirror now."""
        rel_before = self.old_by_url.get(url)
        known = self.old.pages.get(rel_before) if rel_before is not None else None
        have = known is not None and rel_before is not None and (self.root / rel_before).is_file()
        validators = known.validators() if have and known is not None else {}
        await self._polite()
        if validators:
            self.report.conditional += 1
        try:
            fetched = await self.client.get(
                url, in_scope=self.scope.contains, max_bytes=self._limit, validators=validators
            )
        except FetchError as e:
            return self._failed(url, rel_before if have else None, str(e))
        if fetched.status == 304 and have and known is not None and rel_before is not None:
            self.report.not_modified += 1
            return await self._keep(rel_before, known, fetched, self.root / rel_before)
        if fetched.status in (404, 410):
            if have:
                self.report.removed.append(url)
            else:
                self.report.skip(url, f"HTTP {fetched.status}")
            return False
        if fetched.status != 200:
            hint = (
                " (for docs behind a login, pass --header 'Authorization: ...')" if fetched.status in (401, 403) else ""
            )
            return self._failed(url, rel_before if have else None, f"HTTP {fetched.status}{hint}")
        return await self._stored(fetched)

    def _limit(self, content_type: str, url: str) -> int:
        kind = content_kind(content_type, url, b"")
        return size_limit(suffix_of(kind) if kind else ".html", self.options.max_page_bytes)

    def _failed(self, url: str, rel: str | None, why: str) -> bool:
        if rel is None:
            self.report.skip(url, why)
            return False
        self.report.kept.append((url, f"{why}; the copy fetched {self.old.pages[rel].fetched_at[:16]} is kept"))
        self.new.pages[rel] = self.old.pages[rel]
        return True

    async def _stored(self, fetched: Fetched) -> bool:
        url = fetched.url
        kind = content_kind(fetched.headers.get("content-type", ""), url, fetched.body[:1024])
        if kind is None:
            media = media_type(fetched.headers.get("content-type", "")) or "unknown"
            self.report.skip(url, f"content type {media[:60]} is not read")
            return False
        body = as_utf8(fetched.body, fetched.headers.get("content-type", ""), kind)
        if kind == "html":
            links = await anyio.to_thread.run_sync(page_links, body, url)  # parsing overlaps the network
            self.report.furniture += links.furniture
            if links.capped:
                self.report.notes.append(f"{url}: over {len(links.links)} links, the rest not followed")
            canonical = links.canonical
            if canonical and canonical != url and self.scope.contains(canonical) and "?" not in canonical:
                self._enqueue(canonical)
                return False  # this page is a copy: the canonical URL is fetched as itself
            for link in links.links:
                self._enqueue(link)
        elif kind == "markdown":
            for link in markdown_links(body, url).links:
                self._enqueue(link)
        try:
            rel = self.scope.path_of(url, kind)
        except URLError as e:
            self.report.skip(url, str(e))
            return False
        if rel in self.new.pages:
            return False  # the same page by another URL (a folder and its index.html, a redirect)
        existed = self.old.pages.get(rel) is not None and (self.root / rel).is_file()
        try:
            changed = store_page(self.root, rel, body)
        except Exception as e:  # IngestError: a path clash; OSError: the disk
            self.report.skip(url, str(e))
            return False
        if not existed:
            self.report.new += 1
        elif changed:
            self.report.changed += 1
        else:
            self.report.unchanged += 1
        self.new.pages[rel] = PageState(
            url,
            fetched.headers.get("etag"),
            fetched.headers.get("last-modified"),
            fetched.headers.get("content-type"),
            now_utc().isoformat(),
        )
        return True

    async def _keep(self, rel: str, known: PageState, fetched: Fetched, path: Path) -> bool:
        if rel in self.new.pages:
            return False
        self.new.pages[rel] = PageState(
            known.url,
            fetched.headers.get("etag", known.etag),
            fetched.headers.get("last-modified", known.last_modified),
            known.content_type,
            now_utc().isoformat(),
        )
        if path.suffix in (".html", ".md"):
            try:
                body = path.read_bytes()
            except OSError:
                return True
            reader = page_links if path.suffix == ".html" else markdown_links
            found = await anyio.to_thread.run_sync(reader, body, known.url)
            for link in found.links:
                self._enqueue(link)
        return True

    def _finish(self) -> None:
        """The mirror made to hold exactly the pages found (module docstring), and the sidecar written."""
        if self.report.stopped == "time limit":
            for rel, page in self.old.pages.items():
                if rel not in self.new.pages and (self.root / rel).is_file():
                    self.new.pages[rel] = page
                    self.report.kept.append((page.url, "not looked at again: the crawl's time limit"))
        gone = [rel for rel in self.old.pages if rel not in self.new.pages]
        self.report.removed += [self.old.pages[r].url for r in gone if self.old.pages[r].url not in self.report.removed]
        stray = [p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()]
        remove_pages(self.root, [*gone, *(r for r in stray if r not in self.new.pages and r not in gone)])
        self.new.write(self.folder)
        self.report.pages = len(self.new.pages)


async def crawl(
    start: str, folder: Path, options: CrawlOptions, progress: ProgressCallback | None = None
) -> CrawlReport:
    """Crawl ``start`` into the mirror ``folder`` (the caller holds its lock: mirror.locked)."""
    job = Crawl(start, folder, options, progress)
    client = Client(options.headers, in_flight=options.in_flight, timeout=options.page_timeout)
    try:
        return await job.run(client)
    finally:
        await client.aclose()


def run_crawl(start: str, folder: Path, options: CrawlOptions, progress: ProgressCallback | None = None) -> CrawlReport:
    """:func:`crawl`, from synchronous code (the CLI, a watcher's thread)."""
    return anyio.run(crawl, start, folder, options, progress)


__all__ = ["DEFAULT_MAX_PAGES", "Crawl", "CrawlOptions", "CrawlReport", "URLError", "crawl", "run_crawl"]
