"""`mcpower ingest URL`: a small documentation site served on 127.0.0.1 crawled into a dataset —
scope, robots.txt, sitemaps, llms.txt, canonical links, conditional refreshes, removed pages,
URLs in results, and the secret of --header found nowhere (issue 29)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from site_server import Site, serve
from typer.testing import CliRunner

from mcpower import embedding
from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, IngestReport
from mcpower.registry import Registry
from mcpower.search import get_metadata, search
from mcpower.sources.crawl import CrawlOptions
from mcpower.sources.remote import FetchOptions, ingest_source

SECRET = "s3cr3t-t0ken-4b1d"


def page(title: str, body: str, links: tuple[str, ...] = ()) -> str:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>{body}</p>{anchors}</main></body></html>"


def docs_site() -> dict[str, bytes | str]:
    return {
        "/robots.txt": "User-agent: *\nDisallow: /docs/private/\nSitemap: /sitemap.xml\n",
        "/sitemap.xml": (
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            "<url><loc>/docs/orphan.html</loc></url><url><loc>/elsewhere/x.html</loc></url></urlset>"
        ),
        "/docs/llms.txt": "# Docs\n- [Notes](notes.md): notes\n",
        "/docs/": page("Start", "welcome to the gizmo manual", ("install.html", "private/keys.html", "/blog/")),
        "/docs/install.html": page("Install", "install the gizmo with pip", ("./", "usage/", "logo.png")),
        "/docs/usage/": page("Usage", "configure the frobnicator dial", ("../install.html", "old.html")),
        "/docs/usage/old.html": (
            '<html><head><link rel="canonical" href="/docs/usage/"></head><body>an old copy</body></html>'
        ),
        "/docs/orphan.html": page("Orphan", "only the sitemap knows the zeppelin page"),
        "/docs/notes.md": "# Notes\n\nthe llms file lists these quasar notes\n",
        "/docs/logo.png": b"\x89PNG\r\n\x1a\n" + b"\0" * 64,
        "/docs/private/keys.html": page("Keys", "robots forbid this page"),
        "/blog/": page("Blog", "outside the prefix"),
    }


@pytest.fixture
def site() -> Iterator[Site]:
    with serve(Site(pages=docs_site())) as s:
        yield s


def crawl_into(site: Site, datasets_dir: Path, tmp_path: Path, emb: FakeEmbedder, **crawl: object) -> IngestReport:
    options = FetchOptions(crawl=CrawlOptions(**crawl))  # type: ignore[arg-type]
    return ingest_source(
        site.base + "/docs/", datasets_dir, IngestOptions(dataset_id="web"), options, tmp_path / "cache", embedder=emb
    )


@dataclass
class Crawled:
    """The site ingested twice by the CLI with a secret --header: what each run asked and said."""

    site: Site
    datasets: Path
    cache: Path
    first: list[tuple[str, dict[str, str]]]
    second: list[tuple[str, dict[str, str]]]
    outputs: list[str]
    report: dict[str, Any]  # the second run's --json


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    root = tmp_path_factory.mktemp("crawled")
    fake = FakeEmbedder()
    with pytest.MonkeyPatch.context() as mp, serve(Site(pages=docs_site())) as site:
        mp.setattr(embedding, "load_embedder", lambda *a, **k: fake)
        env = {"XDG_CACHE_HOME": str(root / "cache"), "MCPOWER_ALLOWED_MODELS": FakeEmbedder.model_name}
        args = ["ingest", site.base + "/docs/", "--id", "web", "--datasets-dir", str(root / "datasets")]
        args += ["--header", f"Authorization: Bearer {SECRET}"]
        runner, outputs, marks = CliRunner(), [], []
        for extra in ([], ["--json"]):
            marks.append(len(site.requests))
            result = runner.invoke(app, args + extra, env=env)
            assert result.exit_code == 0, result.output
            outputs += [result.stdout, result.stderr]
        yield Crawled(
            site,
            root / "datasets",
            root / "cache",
            site.requests[marks[0] : marks[1]],
            site.requests[marks[1] :],
            outputs,
            json.loads(outputs[-2]),
        )


def test_a_crawl_takes_every_page_under_the_prefix_and_nothing_else(crawled: Crawled) -> None:
    registry = Registry(crawled.datasets)
    paths = {d.path for d in registry.store("web").documents()}
    assert paths == {"index.html", "install.html", "usage/index.html", "orphan.html", "notes.md"}
    asked = [p for p, _ in crawled.first]
    assert "/docs/private/keys.html" not in asked and "/blog/" not in asked  # robots, scope
    assert "/docs/usage/old.html" in asked  # fetched, and left for its canonical URL
    skipped = {s["url"].removeprefix(crawled.site.base): s["reason"] for s in crawled.report["fetch"]["skipped"]}
    assert skipped["/docs/private/keys.html"] == "forbidden by robots.txt"
    assert skipped["/docs/logo.png"].startswith("content type image/png is not read")
    info = registry.store("web").info
    assert info.source is not None and info.source.origin is not None
    assert info.source.origin.url == crawled.site.base + "/docs/" and info.source.origin.kind == "web"
    assert "skipped " + crawled.site.base + "/docs/logo.png: content type image/png" in crawled.outputs[1]
    assert "crawled " + crawled.site.base + "/docs/: 5 pages (5 new" in crawled.outputs[1]


def test_results_carry_the_page_url(crawled: Crawled) -> None:
    registry = Registry(crawled.datasets, allowed_models=[FakeEmbedder.model_name])
    try:
        hit = search(registry, "frobnicator dial", "web").results[0]
        assert hit.path == "usage/index.html"
        assert hit.url == crawled.site.base + "/docs/usage/"
        assert get_metadata(registry, hit.result_id).url == hit.url
        notes = search(registry, "quasar notes", "web").results[0]
        assert notes.url == crawled.site.base + "/docs/notes.md"
    finally:
        registry.close()


def test_a_second_crawl_asks_conditionally_and_embeds_nothing(crawled: Crawled) -> None:
    pages = [
        h for p, h in crawled.second if p.startswith("/docs/") and not p.endswith((".txt", ".xml", ".png", "old.html"))
    ]
    conditional = [h for h in pages if "if-none-match" in h]
    assert len(pages) == 5 and len(conditional) >= 0.8 * len(pages)
    report = crawled.report
    assert report["fetch"]["not_modified"] == 5 and report["fetch"]["conditional_requests"] >= 4
    assert report["embedded"] == 0 and report["published"] is False


def test_the_header_secret_is_sent_and_written_nowhere(crawled: Crawled) -> None:
    sent = [h.get("authorization") for p, h in crawled.first + crawled.second if p.startswith("/docs/")]
    assert sent and all(s == f"Bearer {SECRET}" for s in sent)
    assert not [out for out in crawled.outputs if SECRET in out]
    files = [f for f in [*crawled.datasets.rglob("*"), *crawled.cache.rglob("*")] if f.is_file()]
    assert len(files) > 8 and not [f for f in files if SECRET.encode() in f.read_bytes()]


def test_gone_changed_and_failing_pages(site: Site, datasets_dir: Path, tmp_path: Path) -> None:
    crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
    del site.pages["/docs/orphan.html"]
    site.pages["/docs/install.html"] = page("Install", "install the gizmo with conda now", ("./", "usage/"))
    site.handlers["/docs/notes.md"] = lambda h: h.send(503, b"busy", {"Content-Type": "text/plain"})  # type: ignore[attr-defined]
    emb = FakeEmbedder()

    report = crawl_into(site, datasets_dir, tmp_path, emb)

    assert (report.removed, report.changed, report.embedded) == (1, 1, len(emb.embedded))
    assert report.fetch.removed == [site.base + "/docs/orphan.html"]
    assert emb.embedded and all("conda" in t or "Install" in t for t in emb.embedded)
    assert [u for u, _ in report.fetch.kept] == [site.base + "/docs/notes.md"]  # HTTP 503: its copy stays
    paths = {d.path for d in Registry(datasets_dir).store("web").documents()}
    assert "orphan.html" not in paths and "notes.md" in paths


def test_a_bad_header_is_named_without_its_value(datasets_dir: Path) -> None:
    result = CliRunner().invoke(
        app, ["ingest", "http://127.0.0.1:9/docs/", "--datasets-dir", str(datasets_dir), "--header", f"Host: {SECRET}"]
    )

    assert result.exit_code == 2
    assert "Host" in result.stderr and SECRET not in result.output


def test_serve_watch_refresh_re_crawls_on_its_interval(
    datasets_dir: Path, tmp_path: Path, make_registry: Callable[[], Registry]
) -> None:
    from mcpower.layout import read_watch
    from mcpower.watch.refresh import Refresher

    pages: dict[str, bytes | str] = {"/docs/": "# Start\n\n[a](a.md)\n", "/docs/a.md": "# A\n\nthe first albatross\n"}
    with serve(Site(pages=pages)) as site:
        site.handlers["/docs/"] = lambda h: h.send(200, b"# Start\n\n[a](a.md)\n", {"Content-Type": "text/markdown"})  # type: ignore[attr-defined]
        crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
        registry = make_registry()
        said: list[str] = []
        refresher = Refresher(
            registry,
            tmp_path / "cache",
            interval=3600,
            embedder_factory=lambda info: FakeEmbedder(),
            clock=lambda: 0,
            on_refresh=lambda d, m: said.append(m),
        )
        try:
            refresher.step(0.0)  # claims it; fetched just now, so due in about an hour
            asked = len(site.requests)
            site.pages["/docs/a.md"] = "# A\n\nthe second albatross with a pelican\n"
            refresher.step(3000.0)
            assert len(site.requests) == asked  # not due yet

            refresher.step(3601.0)

            assert said == ["refreshed: 0 added, 1 changed, 0 removed"], said
            assert "if-none-match" in site.requests[-1][1] or any(
                "if-none-match" in h for _, h in site.requests[asked:]
            )
            assert search(registry, "pelican", "web").results[0].path == "a.md"
            state = read_watch(datasets_dir / "web")
            assert state is not None and state.last_counts is not None and state.last_counts.changed == 1
        finally:
            refresher.stop()


def test_datasets_and_the_web_pages_show_the_site_and_link_the_page(crawled: Crawled) -> None:
    import anyio
    from asgi_fixtures import app_serving, asgi_client

    from mcpower.server.http import HttpOptions

    listing = CliRunner().invoke(app, ["datasets", "--datasets-dir", str(crawled.datasets)])
    assert f"site {crawled.site.base}/docs/ fetched " in listing.stdout
    registry = Registry(crawled.datasets, embedder_factory=lambda model: FakeEmbedder())

    async def pages() -> tuple[str, str, dict[str, Any]]:
        async with app_serving(registry, HttpOptions(token=None)) as (_, web), asgi_client(web) as h:
            datasets = (await h.get("/")).text
            found = (await h.get("/search", params={"q": "frobnicator dial", "format": "json"})).json()
            top = found["response"]["results"][0]
            return datasets, (await h.get("/doc", params={"id": top["result_id"]})).text, top

    try:
        datasets, doc, top = anyio.run(pages)
    finally:
        registry.close()
    url = crawled.site.base + "/docs/usage/"
    assert top["url"] == url
    assert f'href="{crawled.site.base}/docs/"' in datasets and 'data-testid="dataset-fetched"' in datasets
    assert f'<a href="{url}" rel="noopener noreferrer" data-testid="doc-url">' in doc
