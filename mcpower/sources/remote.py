"""Ingesting a fetched source: fetch it into its cache folder (crawl.py, git.py), then run the
ordinary folder ingest on that folder with the source recorded. `mcpower ingest URL`, a refresh by
`serve --watch --refresh` and library callers all come here.

The cache folder's lock is held from the fetch to the publish, so two ingests of one source never
write its folder at once; the dataset's own lock is taken by the ingest as for any folder.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from mcpower import embedding
from mcpower.errors import IngestError
from mcpower.ingestion import IngestOptions, IngestPlan, IngestReport, ProgressCallback, ingest
from mcpower.manifest import Origin, is_valid_id, now_utc, slugify
from mcpower.sources import kind_of
from mcpower.sources.crawl import CrawlOptions, CrawlReport, run_crawl
from mcpower.sources.git import DEFAULT_GIT_TIMEOUT, DEFAULT_MAX_REPO_BYTES, GitReport, fetch_repository, subdir_of
from mcpower.sources.mirror import locked, source_folder
from mcpower.sources.robots import RobotsUnavailableError
from mcpower.sources.urls import Scope, URLError
from mcpower.store import Catalog
from mcpower.store.local import LocalCatalog


@dataclass(frozen=True)
class FetchOptions:
    """How to fetch a source: the crawl's bounds, or a repository's ref, folder and bounds."""

    crawl: CrawlOptions = field(default_factory=CrawlOptions)
    ref: str | None = None
    subdir: str | None = None
    submodules: bool = False
    git: bool = False  # an http(s) URL names a repository even without .git
    git_timeout: float = DEFAULT_GIT_TIMEOUT
    max_repo_bytes: int = DEFAULT_MAX_REPO_BYTES


def ingest_source(
    spec: str,
    target: Path | Catalog,
    options: IngestOptions,
    fetch: FetchOptions,
    cache_dir: Path,
    *,
    embedder: embedding.Embedder | None = None,
    progress: ProgressCallback | None = None,
    announce: Callable[[IngestPlan], None] | None = None,
) -> IngestReport:
    """Fetch the site or repository ``spec`` and ingest it as a dataset of ``target`` (``announce``
    as for :func:`mcpower.ingestion.ingest`).

    Raises:
        IngestError: a bad address, robots.txt unavailable, nothing fetched, git failed, and
            every error of :func:`mcpower.ingestion.ingest`.
        DatasetLockedError: another ingest of this source or dataset is running.
    """
    kind = kind_of(spec, fetch.git)
    if kind is None:
        raise IngestError(f"{spec[:200]}: not a URL or repository address")
    catalog = LocalCatalog(target) if isinstance(target, Path) else target
    fetch_into: Callable[[Path, IngestOptions], tuple[Path, IngestOptions, CrawlReport | GitReport]]
    if kind == "web":
        try:
            scope = Scope.of(spec)
        except URLError as e:
            raise IngestError(f"{spec[:200]}: {e}") from None
        address, names = scope.root, [*scope.prefix.strip("/").split("/")[-1:], urlsplit(scope.root).hostname or ""]
        fetch_into = partial(_fetch_site, scope, fetch=fetch, progress=progress)
    else:
        name = re.split(r"[/:]", spec.rstrip("/"))[-1].removesuffix(".git") or "repository"
        address, names = spec, [name]
        fetch_into = partial(_fetch_repository, spec, name, fetch=fetch)
    ds_id = _dataset_id(options, names)
    folder = source_folder(cache_dir, catalog.location(ds_id), ds_id, address)
    with locked(folder, options.wait):  # from the fetch to the publish
        # A fetched source's links never lead out of it.
        options = dataclasses.replace(options, dataset_id=ds_id, follow_symlinks=False)
        root, options, fetched = fetch_into(folder, options)
        report = ingest(root, target, options, embedder=embedder, progress=progress, announce=announce)
    report.fetch = fetched
    return report


def _fetch_site(
    scope: Scope, folder: Path, options: IngestOptions, *, fetch: FetchOptions, progress: ProgressCallback | None
) -> tuple[Path, IngestOptions, CrawlReport]:
    """Crawl ``scope`` into ``folder``: the pages to ingest, ``options`` naming the site, the crawl's report."""
    try:
        crawled = run_crawl(scope.root, folder, fetch.crawl, progress)
    except RobotsUnavailableError as e:
        raise IngestError(
            f"robots.txt could not be read ({e}); as RFC 9309 asks, nothing was crawled. Try again later"
        ) from None
    if crawled.pages == 0:
        raise IngestError(f"{scope.root}: no page could be fetched — {crawl_summary(crawled)}")
    parts = urlsplit(scope.root)
    options = dataclasses.replace(
        options,
        name=options.name or parts.netloc + scope.prefix.rstrip("/"),
        description=options.description or f"Pages of {scope.root}",
        origin=Origin(kind="web", url=scope.root, fetched_at=now_utc()),
    )
    return folder / "pages", options, crawled


def _fetch_repository(
    spec: str, name: str, folder: Path, options: IngestOptions, *, fetch: FetchOptions
) -> tuple[Path, IngestOptions, GitReport]:
    """Clone or update ``spec`` into ``folder``: the folder to ingest, ``options`` naming the
    repository, what was fetched."""
    fetched = fetch_repository(
        spec,
        folder,
        fetch.ref,
        headers=fetch.crawl.headers,
        submodules=fetch.submodules,
        timeout=fetch.git_timeout,
        max_bytes=fetch.max_repo_bytes,
    )
    root = subdir_of(folder / "checkout", fetch.subdir)
    options = dataclasses.replace(
        options,
        name=options.name or name + (f"/{fetch.subdir.strip('/')}" if fetch.subdir else ""),
        description=options.description or f"Files of {spec}" + (f" ({fetch.subdir})" if fetch.subdir else ""),
        origin=Origin(
            kind="git",
            url=spec,
            ref=fetch.ref,
            commit=fetched.commit or None,
            subdir=fetch.subdir.strip("/") if fetch.subdir else None,
            fetched_at=now_utc(),
        ),
    )
    return root, options, fetched


def _dataset_id(options: IngestOptions, candidates: list[str]) -> str:
    if options.dataset_id is not None:
        return options.dataset_id
    for name in candidates:
        if is_valid_id(slugify(name)):
            return slugify(name)
    raise IngestError("cannot derive a dataset id from the address; pass one with --id (e.g. --id my-docs)")


def crawl_summary(report: CrawlReport, examples: int = 3) -> str:
    """What a crawl skipped, by reason: 'HTTP 404 (2: a, b); ...'."""
    by_reason: dict[str, list[str]] = {}
    for url, why in [*report.skipped, *report.kept]:
        by_reason.setdefault(why.split(" (")[0][:120], []).append(url)
    parts = [
        f"{why} ({len(urls)}: {', '.join(urls[:examples])}{', ...' if len(urls) > examples else ''})"
        for why, urls in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    ]
    if report.stopped:
        parts.append(f"stopped at the {report.stopped}")
    return "; ".join(parts) or "the start page gave nothing"
