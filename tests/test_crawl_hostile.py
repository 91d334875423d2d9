"""A crawl against hostile and misbehaving sites: every case bounded and reported, never a hang, a
blow-up or a request outside its scope (issue 29). Crawls only (no ingest): they run in a blink."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import anyio
import pytest
from site_server import Site, endless, gzip_bomb, serve, slowloris

from mcpower.sources import guard
from mcpower.sources.crawl import CrawlOptions, CrawlReport, run_crawl
from mcpower.sources.guard import AddressPolicy, address_class
from mcpower.sources.http import Client, FetchError
from mcpower.sources.robots import RobotsUnavailableError
from mcpower.sources.urls import Scope, URLError, normalize


def crawl(site: Site, tmp_path: Path, start: str = "/docs/", **options: object) -> CrawlReport:
    return run_crawl(site.base + start, tmp_path / "mirror", CrawlOptions(**options))  # type: ignore[arg-type]


def link_page(*hrefs: str) -> str:
    return "<html><body>" + "".join(f'<a href="{h}">{h}</a>' for h in hrefs) + "</body></html>"


def reasons(report: CrawlReport) -> dict[str, str]:
    return {url.rsplit("/", 1)[-1]: why for url, why in report.skipped}


def test_hostile_pages_are_each_bounded_and_reported(tmp_path: Path) -> None:
    pages: dict[str, bytes | str] = {
        "/docs/": link_page("a.html", "loop1", "away", "endless", "bomb", "slow", "many.html"),
        "/docs/a.html": link_page("b.html"),
        "/docs/b.html": link_page("a.html", "./", "../docs/a.html"),  # circles
        "/docs/many.html": link_page(*(f"p{i}.html" for i in range(100_000))),
    }
    site = Site(
        pages=pages, redirects={"/docs/loop1": "/docs/loop2", "/docs/loop2": "/docs/loop1", "/docs/away": "/admin/"}
    )
    site.handlers.update({"/docs/endless": endless, "/docs/bomb": gzip_bomb, "/docs/slow": slowloris})
    with serve(site):
        report = crawl(site, tmp_path, max_page_bytes=4 * 1024 * 1024, page_timeout=2.0, max_pages=5)

    why = reasons(report)
    assert "bomb" in why
    assert why["loop1"].startswith("a redirect loop")
    assert why["away"].startswith("redirects out of scope")
    assert "/admin/" not in [p for p, _ in site.requests]
    assert why["endless"].startswith("larger than the 4 MB limit")
    assert why["bomb"].startswith("larger than") and "decoded" in why["bomb"]
    assert why["slow"].startswith("no complete answer within 2 s")
    assert [n for n in report.notes if "many.html" in n and "links" in n]  # capped, reported
    assert report.stopped == "request limit" and report.requests <= 30 + 4  # 30: the least limit, 4 in flight
    asked = [p for p, _ in site.requests]
    assert asked.count("/docs/a.html") == 1 and asked.count("/docs/b.html") == 1  # circles end


def test_a_huge_robots_txt_is_read_to_500_kib(tmp_path: Path) -> None:
    rules = "User-agent: *\nDisallow: /docs/secret.html\n"
    site = Site(pages={"/robots.txt": rules + "# " + "x" * (10 * 1024 * 1024) + "\nDisallow: /docs/\n"})
    site.pages.update({"/docs/": link_page("secret.html", "open.html"), "/docs/open.html": "<p>open</p>"})
    with serve(site):
        report = crawl(site, tmp_path)

    assert report.pages == 2
    assert ("secret.html", "forbidden by robots.txt") in [(u.rsplit("/", 1)[-1], w) for u, w in report.skipped]
    assert [n for n in report.notes if "only its first 500 KiB" in n]


def test_robots_txt_that_fails_with_a_server_error_stops_the_crawl(tmp_path: Path) -> None:
    site = Site(pages={"/docs/": "<p>x</p>"})
    site.handlers["/robots.txt"] = lambda h: h.send(503, b"down", {})  # type: ignore[attr-defined]
    with serve(site), pytest.raises(RobotsUnavailableError, match="HTTP 503"):
        crawl(site, tmp_path)

    assert [p for p, _ in site.requests] == ["/robots.txt"]


def test_the_crawl_never_has_more_requests_in_flight_than_set(tmp_path: Path) -> None:
    pages: dict[str, bytes | str] = {"/docs/": link_page(*(f"p{i}.html" for i in range(24)))}
    pages.update({f"/docs/p{i}.html": f"<p>page {i}</p>" for i in range(24)})
    site = Site(pages=pages, hold_until=3, hold_prefix="/docs/p")  # each waits until 3 are in flight
    with serve(site):
        report = crawl(site, tmp_path, in_flight=3)

    assert report.pages == 25
    assert site.max_in_flight == 3


def test_crawl_delay_spaces_the_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(anyio, "sleep", sleep)
    site = Site(pages={"/robots.txt": "User-agent: mcpower\nCrawl-delay: 7\n", "/docs/": link_page("a.html", "b.html")})
    site.pages.update({"/docs/a.html": "<p>a</p>", "/docs/b.html": "<p>b</p>"})
    with serve(site):
        crawl(site, tmp_path)

    assert len(slept) == 3 and sorted(slept)[-1] >= 13.9  # the third request waits for two delays


def test_a_public_start_never_connects_to_a_private_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name answers a loopback address at connect time; the guard checks the
    address the socket would open, so nothing is sent."""
    with serve(Site(pages={"/": "<p>internal</p>"})) as site:

        async def rebinding(host: str, port: int) -> list[guard.Address]:
            return [ipaddress.ip_address("127.0.0.1")]

        monkeypatch.setattr(guard, "resolve", rebinding)

        async def fetch() -> None:
            client = Client(policy=AddressPolicy(start_class="public"))
            try:
                await client.get(f"http://docs.example.test:{site.port}/", in_scope=lambda u: True, max_bytes=1000)
            finally:
                await client.aclose()

        with pytest.raises(FetchError, match=r"loopback address.*not connected to"):
            anyio.run(fetch)
        assert site.requests == []


def test_address_classes() -> None:
    policy = AddressPolicy(start_class="public")
    for ip, kind, allowed in [
        ("93.184.216.34", "public", True),
        ("10.0.0.8", "private", False),
        ("192.168.1.1", "private", False),
        ("127.0.0.1", "loopback", False),
        ("::1", "loopback", False),
        ("169.254.169.254", "link-local", False),  # cloud metadata
        ("::ffff:127.0.0.1", "loopback", False),
        ("0.0.0.0", "forbidden", False),
    ]:
        address = ipaddress.ip_address(ip)
        assert (address_class(address), policy.allows(address)) == (kind, allowed), ip
    local = AddressPolicy(start_class="loopback")
    assert local.allows(ipaddress.ip_address("127.0.0.1")) and local.allows(ipaddress.ip_address("8.8.8.8"))
    assert not local.allows(ipaddress.ip_address("169.254.169.254"))


def test_urls_map_to_mirror_paths_and_back() -> None:
    scope = Scope.of("HTTP://Docs.Example.com:80/guide/intro.html#top")
    assert scope.root == "http://docs.example.com/guide/"
    for url, kind, rel in [
        ("http://docs.example.com/guide/", "html", "index.html"),
        ("http://docs.example.com/guide/a/b.html", "html", "a/b.html"),
        ("http://docs.example.com/guide/a/", "html", "a/index.html"),
        ("http://docs.example.com/guide/start", "html", "start^.html"),
        ("http://docs.example.com/guide/notes.md", "markdown", "notes.md"),
        ("http://docs.example.com/guide/x.html", "markdown", "x.html^.md"),
        ("http://docs.example.com/guide/caf%C3%A9%20au%20lait.html", "html", "caf%C3%A9%20au%20lait.html"),
    ]:
        assert scope.path_of(url, kind) == rel
        assert scope.url_of(rel) == url
    assert normalize("http://docs.example.com/guide/a/../b/./c%7e.html") == "http://docs.example.com/guide/b/c~.html"
    assert not scope.contains("http://docs.example.com/other/") and not scope.contains(
        "https://docs.example.com/guide/"
    )
    for bad in ("http://docs.example.com/guide/.git/config", "http://docs.example.com/guide/a?q=1"):
        with pytest.raises(URLError):
            scope.path_of(bad, "html")
    with pytest.raises(URLError, match="credentials"):
        normalize("https://user:pw@docs.example.com/")
