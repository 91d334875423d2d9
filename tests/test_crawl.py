"""`mcpower ingest URL`: a small documentation site served on 127.0.0.1 crawled into a dataset —
scope, robots.txt, sitemaps, llms.txt, canonical links, conditional refreshes, removed pages,
URLs in results, and the secret of --header found nowhere (issue 29)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from site_server import Site, serve
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions
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


def crawl_into(site: Site, datasets_dir: Path, tmp_path: Path, emb: FakeEmbedder, **crawl: object):
    options = FetchOptions(crawl=CrawlOptions(**crawl))  # type: ignore[arg-type]
    return ingest_source(
        site.base + "/docs/", datasets_dir, IngestOptions(dataset_id="web"), options, tmp_path / "cache", embedder=emb
    )


def test_a_crawl_takes_every_page_under_the_prefix_and_nothing_else(
    site: Site, datasets_dir: Path, tmp_path: Path
) -> None:
    report = crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())

    registry = Registry(datasets_dir)
    paths = {d.path for d in registry.store("web").documents()}
    assert paths == {"index.html", "install.html", "usage/index.html", "orphan.html", "notes.md"}
    asked = [p for p, _ in site.requests]
    assert "/docs/private/keys.html" not in asked and "/blog/" not in asked  # robots, scope
    assert (site.base + "/docs/private/keys.html", "forbidden by robots.txt") in report.fetch.skipped
    assert any(why.startswith("content type image/png") for _, why in report.fetch.skipped)
    info = registry.store("web").info
    assert info.source is not None and info.source.origin is not None
    assert info.source.origin.url == site.base + "/docs/" and info.source.origin.kind == "web"


def test_results_carry_the_page_url(
    site: Site, datasets_dir: Path, tmp_path: Path, make_registry: Callable[[], Registry]
) -> None:
    crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
    registry = make_registry()

    hit = search(registry, "frobnicator dial", "web").results[0]
    assert hit.path == "usage/index.html"
    assert hit.url == site.base + "/docs/usage/"
    assert get_metadata(registry, hit.result_id).url == hit.url
    notes = search(registry, "quasar notes", "web").results[0]
    assert notes.url == site.base + "/docs/notes.md"


def test_a_second_crawl_asks_conditionally_and_embeds_nothing(site: Site, datasets_dir: Path, tmp_path: Path) -> None:
    crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
    first = len(site.requests)
    emb = FakeEmbedder()

    report = crawl_into(site, datasets_dir, tmp_path, emb)

    pages = [h for p, h in site.requests[first:] if p.startswith("/docs/") and not p.endswith((".txt", ".png"))]
    conditional = [h for h in pages if "if-none-match" in h]
    assert len(conditional) >= 0.8 * report.documents
    assert report.fetch.not_modified == report.documents
    assert emb.embedded == [] and report.embedded == 0 and not report.published


def test_a_page_gone_from_the_site_leaves_the_dataset_and_a_changed_one_is_re_read(
    site: Site, datasets_dir: Path, tmp_path: Path
) -> None:
    crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
    del site.pages["/docs/orphan.html"]
    site.pages["/docs/install.html"] = page("Install", "install the gizmo with conda now", ("./",))
    emb = FakeEmbedder()

    report = crawl_into(site, datasets_dir, tmp_path, emb)

    assert report.removed == 1 and report.changed == 1
    assert site.base + "/docs/orphan.html" in report.fetch.removed
    assert emb.embedded and all("conda" in t or "Install" in t for t in emb.embedded)
    paths = {d.path for d in Registry(datasets_dir).store("web").documents()}
    assert "orphan.html" not in paths


def test_a_page_the_site_fails_to_serve_keeps_its_previous_copy(site: Site, datasets_dir: Path, tmp_path: Path) -> None:
    crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())
    site.handlers["/docs/install.html"] = lambda h: h.send(503, b"busy", {"Content-Type": "text/plain"})  # type: ignore[attr-defined]

    report = crawl_into(site, datasets_dir, tmp_path, FakeEmbedder())

    assert [u for u, _ in report.fetch.kept] == [site.base + "/docs/install.html"]
    assert "install.html" in {d.path for d in Registry(datasets_dir).store("web").documents()}


def test_the_header_secret_is_sent_and_written_nowhere(
    site: Site, datasets_dir: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    runner = CliRunner()
    args = ["ingest", site.base + "/docs/", "--id", "web", "--datasets-dir", str(datasets_dir)]
    args += ["--header", f"Authorization: Bearer {SECRET}"]
    for extra in ([], ["--json"]):
        result = runner.invoke(app, args + extra, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert result.exit_code == 0, result.output
        assert SECRET not in result.stdout and SECRET not in result.stderr
    sent = [h.get("authorization") for p, h in site.requests if p.startswith("/docs/")]
    assert sent and all(s == f"Bearer {SECRET}" for s in sent)
    for file in [*datasets_dir.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        if file.is_file():
            assert SECRET.encode() not in file.read_bytes(), file
    data = json.loads(result.stdout)
    assert data["fetch"]["pages"] == 5 and data["fetch"]["conditional_requests"] >= 4


def test_a_bad_header_is_named_without_its_value(datasets_dir: Path) -> None:
    result = CliRunner().invoke(
        app, ["ingest", "http://127.0.0.1:9/docs/", "--datasets-dir", str(datasets_dir), "--header", f"Host: {SECRET}"]
    )

    assert result.exit_code == 2
    assert "Host" in result.stderr and SECRET not in result.output
