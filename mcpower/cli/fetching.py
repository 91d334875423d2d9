"""`mcpower ingest URL` and `ingest GIT_URL`: the options of a fetched source, and its report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcpower.cli.progress import duration, plural

if TYPE_CHECKING:
    from mcpower.sources.crawl import CrawlReport
    from mcpower.sources.remote import FetchOptions

MaxPages = Annotated[
    int,
    typer.Option(
        "--max-pages", min=1, max=1_000_000, help="A crawl fetches at most this many pages.", rich_help_panel="Fetching"
    ),
]
InFlight = Annotated[
    int,
    typer.Option(
        "--max-requests", min=1, max=32, help="Requests a crawl has in flight at once.", rich_help_panel="Fetching"
    ),
]
PageTimeout = Annotated[
    float,
    typer.Option(
        "--page-timeout",
        min=1,
        help="Seconds a page may take, redirects and body included.",
        rich_help_panel="Fetching",
    ),
]
CrawlTimeout = Annotated[
    float,
    typer.Option(
        "--crawl-timeout",
        min=1,
        help="Seconds a crawl or a git command may take in all; a crawl stopped by it keeps the pages it did "
        "not get to.",
        rich_help_panel="Fetching",
    ),
]
Headers = Annotated[
    list[str] | None,
    typer.Option(
        "--header",
        help="'Name: value' sent with every request to the site or repository (repeatable), e.g. "
        "'Authorization: Bearer ...' for docs behind a login; never written to disk or shown.",
        rich_help_panel="Fetching",
        show_default=False,
    ),
]
Ref = Annotated[
    str | None,
    typer.Option("--ref", help="A repository's branch or tag [default: its HEAD].", rich_help_panel="Fetching"),
]
Subdir = Annotated[
    str | None,
    typer.Option(
        "--subdir", help="Ingest only this folder of the repository (e.g. docs/).", rich_help_panel="Fetching"
    ),
]
GitFlag = Annotated[
    bool,
    typer.Option(
        "--git", help="The http(s) URL is a git repository (one ending in .git is).", rich_help_panel="Fetching"
    ),
]
Submodules = Annotated[
    bool,
    typer.Option("--recurse-submodules", help="Also clone a repository's submodules.", rich_help_panel="Fetching"),
]


def fetch_options(
    max_pages: int,
    in_flight: int,
    page_timeout: float,
    crawl_timeout: float,
    headers: list[str] | None,
    ref: str | None,
    subdir: str | None,
    git: bool,
    submodules: bool,
    max_page_bytes: int,
) -> FetchOptions:
    """The fetch's options; a bad --header is a usage error naming the header, never its value."""
    from mcpower.sources.crawl import CrawlOptions
    from mcpower.sources.http import parse_header
    from mcpower.sources.remote import FetchOptions

    parsed = []
    for text in headers or []:
        try:
            parsed.append(parse_header(text))
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--header") from None
    crawl = CrawlOptions(
        max_pages=max_pages,
        in_flight=in_flight,
        page_timeout=page_timeout,
        total_timeout=crawl_timeout,
        max_page_bytes=max_page_bytes,
        headers=tuple(parsed),
    )
    return FetchOptions(crawl=crawl, ref=ref, subdir=subdir, git=git, submodules=submodules, git_timeout=crawl_timeout)


def fetch_json(fetched: Any) -> dict[str, Any] | None:
    """A fetch's report for --json."""
    from mcpower.sources.crawl import CrawlReport
    from mcpower.sources.git import GitReport

    if isinstance(fetched, CrawlReport):
        return {
            "kind": "web",
            "start": fetched.start,
            "pages": fetched.pages,
            "new": fetched.new,
            "changed": fetched.changed,
            "unchanged": fetched.unchanged,
            "not_modified": fetched.not_modified,
            "removed": fetched.removed,
            "kept": [{"url": u, "reason": r} for u, r in fetched.kept],
            "skipped": [{"url": u, "reason": r} for u, r in fetched.skipped],
            "skipped_more": fetched.skipped_more,
            "requests": fetched.requests,
            "conditional_requests": fetched.conditional,
            "sitemaps": fetched.seeds,
            "stopped": fetched.stopped,
            "notes": fetched.notes,
            "seconds": round(fetched.seconds, 2),
        }
    if isinstance(fetched, GitReport):
        return {
            "kind": "git",
            "repository": fetched.repository,
            "ref": fetched.ref,
            "commit": fetched.commit,
            "previous_commit": fetched.previous,
            "cloned": fetched.cloned,
            "seconds": round(fetched.seconds, 2),
        }
    return None


def show_fetch(fetched: Any) -> None:
    """A fetch's report on stderr, before the ingest's own."""
    from mcpower.sources.crawl import CrawlReport
    from mcpower.sources.git import GitReport

    if isinstance(fetched, GitReport):
        was = f" (was {fetched.previous[:12]})" if fetched.previous and fetched.previous != fetched.commit else ""
        verb = "cloned" if fetched.cloned else "fetched"
        typer.echo(
            f"{verb} {fetched.repository} at {fetched.commit[:12]}{was} in {duration(fetched.seconds)}", err=True
        )
        return
    if not isinstance(fetched, CrawlReport):
        return
    _show_crawl(fetched)


def _show_crawl(r: CrawlReport) -> None:
    for url, why in r.skipped:
        typer.echo(f"skipped {url}: {why}", err=True)
    if r.skipped_more:
        typer.echo(f"skipped {r.skipped_more} more pages (--json lists the first ones)", err=True)
    for url, why in r.kept:
        typer.echo(f"kept {url}: {why}", err=True)
    for url in r.removed:
        typer.echo(f"removed {url}: gone from the site", err=True)
    for note in r.notes:
        typer.echo(f"note: {note}", err=True)
    if r.stopped:
        typer.echo(f"note: the crawl stopped at its {r.stopped} (--max-pages, --crawl-timeout)", err=True)
    typer.echo(
        f"crawled {r.start}: {plural(r.pages, 'page')} ({r.new} new, {r.changed} changed, "
        f"{r.unchanged + r.not_modified} unchanged, {len(r.removed)} removed, {len(r.skipped) + r.skipped_more} skipped); "
        f"{plural(r.requests, 'request')}, {r.conditional} conditional, in {duration(r.seconds)}",
        err=True,
    )
