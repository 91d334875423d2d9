"""`mcpower ingest`: build or update a dataset from a folder, a site's URL or a git repository, with
progress bars and a report."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mcpower.cli.common import DatasetsDir, JsonFlag, WatchDebounce, milvus_catalog, settings, setup_logging
from mcpower.cli.fetching import (
    CrawlTimeout,
    GitFlag,
    Headers,
    InFlight,
    MaxPages,
    PageTimeout,
    Ref,
    Subdir,
    Submodules,
    fetch_json,
    fetch_options,
    show_fetch,
)
from mcpower.cli.plans import dry_run_lines, duplicate_lines, plan_line
from mcpower.cli.progress import Progress, duration, plural, rate
from mcpower.defaults import BACKENDS, DEFAULT_CHUNK_TOKENS, DEFAULT_MAX_FILE_MB, DEFAULT_OVERLAP, DEFAULT_TOP_K
from mcpower.sites import KEEP_HINT, furniture_counts, is_furniture

if TYPE_CHECKING:
    from mcpower.config import Settings
    from mcpower.ingestion import IngestPlan, IngestReport


def ingest(
    path: Annotated[
        str,
        typer.Argument(
            help="Folder of documents (.md .mdx .txt .rst .html .pdf .docx .ipynb; code with --code), a site's URL "
            "(http(s)://…: the pages under it are crawled) or a git repository (…/repo.git, git@host:path, "
            "ssh://…, file://…).",
            show_default=False,
        ),
    ],
    dataset_id: Annotated[
        str | None, typer.Option("--id", help="Dataset id (a-z, 0-9, -); default: the folder name as a slug.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Human-readable name; default: the folder name.")] = None,
    description: Annotated[str | None, typer.Option(help="What the dataset holds (shown to MCP clients).")] = None,
    datasets_dir: DatasetsDir = None,
    milvus_uri: Annotated[
        str | None,
        typer.Option(
            "--milvus-uri",
            help="Write the dataset into this Milvus database instead of the datasets folder: a milvus-lite file "
            "(x.db) or http(s)://host:19530 [env MCPOWER_MILVUS_URI; token in MCPOWER_MILVUS_TOKEN].",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Embedding model: all-MiniLM-L6-v2 or multilingual-e5-small (packaged), a local folder or a "
            "cached hub name [env MCPOWER_MODEL; default: the previous version's, else chosen by the documents' "
            "languages].",
            show_default=False,
        ),
    ] = None,
    query_prompt: Annotated[
        str | None,
        typer.Option(
            help="Text put before each query, e.g. 'query: ' for E5 models [default: the model folder's "
            "config_sentence_transformers.json].",
            show_default=False,
        ),
    ] = None,
    document_prompt: Annotated[
        str | None,
        typer.Option(
            help="Text put before each document chunk, e.g. 'passage: ' for E5 models [default: the model folder's].",
            show_default=False,
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help=f"Embedding backend: {', '.join(BACKENDS)} [env MCPOWER_BACKEND; default: the dataset's own, else onnx]."
        ),
    ] = None,
    chunk_tokens: Annotated[
        int, typer.Option(help="Chunk size in model tokens, heading path included.")
    ] = DEFAULT_CHUNK_TOKENS,
    overlap: Annotated[int, typer.Option(help="Tokens shared by consecutive chunks of a section.")] = DEFAULT_OVERLAP,
    include: Annotated[list[str] | None, typer.Option(help="Only files matching this glob (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Skip files matching this glob (repeatable).")] = None,
    code: Annotated[
        bool,
        typer.Option(
            "--code", help="Also read source code (.py .js .ts .go .rs .java); --include '*.py' reads one kind."
        ),
    ] = False,
    keep_site_files: Annotated[
        bool,
        typer.Option(
            "--keep-site-files",
            help="In a built documentation site (Sphinx, MkDocs, rustdoc, Javadoc, Doxygen), also read its "
            "furniture: page source copies, index and search pages, static assets.",
        ),
    ] = False,
    keep_duplicates: Annotated[
        bool,
        typer.Option(
            "--keep-duplicates",
            help="Also index a document whose text another one holds (a page's source beside it, a copy, an "
            "included fragment); a file reached twice by links is still read once.",
        ),
    ] = False,
    language: Annotated[
        str | None,
        typer.Option(
            "--language",
            help="The documents' language (ISO 639-1: en, de, fr, ja, zh ...): every chunk is taken to be in it. "
            "auto detects each chunk's [default: as the previous ingest recorded, else auto].",
            show_default=False,
        ),
    ] = None,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--default-top-k",
            min=1,
            max=100,
            help="Results a search of this dataset returns when it asks for no number "
            f"[default: the previous version's, else {DEFAULT_TOP_K}].",
            show_default=False,
        ),
    ] = None,
    follow_symlinks: Annotated[bool, typer.Option(help="Follow symlinks that lead outside the folder.")] = False,
    max_file_mb: Annotated[
        float | None,
        typer.Option(
            help=f"Skip files larger than this; PDF, Word and notebooks may be 10 times it "
            f"[env MCPOWER_MAX_FILE_MB; default {DEFAULT_MAX_FILE_MB:g}]."
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full", help="Re-embed everything: nothing carried over, nothing taken from the embedding store."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Read and plan only: files, duplicates, chunks, time to embed, what would be removed. Nothing is "
            "published; without a recorded rate, 16 chunks are embedded to time the model.",
        ),
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Rebuild the dataset from this folder even though it was built from another one."
        ),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for another ingest of this dataset instead of failing.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="No progress: neither bars (on a terminal) nor progress lines (in a pipe or log)."
        ),
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="Then keep watching the folder and re-ingest on changes (Ctrl-C stops).")
    ] = False,
    watch_debounce: WatchDebounce = None,
    as_json: JsonFlag = False,
    max_pages: MaxPages = 1000,
    max_requests: InFlight = 4,
    page_timeout: PageTimeout = 30.0,
    crawl_timeout: CrawlTimeout = 3600.0,
    header: Headers = None,
    ref: Ref = None,
    subdir: Subdir = None,
    git: GitFlag = False,
    recurse_submodules: Submodules = False,
) -> None:
    """Build or update a dataset from a folder of documents, a documentation site or a git repository
    (only changed files are re-embedded; a site is asked only for what changed since the last crawl)."""
    from mcpower.ingestion import IngestOptions
    from mcpower.ingestion import ingest as run_ingest
    from mcpower.plan import PLAN_SHOWN
    from mcpower.sources import kind_of

    remote = kind_of(path, git)
    if remote is not None and watch:
        raise typer.BadParameter(
            "a site or repository is kept current by `mcpower serve --watch --refresh SECONDS`", param_hint="--watch"
        )
    if remote is None and (ref or subdir or header):
        raise typer.BadParameter("--ref, --subdir and --header are for a URL or a repository, not a folder")

    setup_logging()
    # SIGTERM unwinds like Ctrl-C, so the staging folder is removed on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    s = settings(
        datasets_dir=datasets_dir,
        milvus_uri=milvus_uri,
        model=model,
        backend=backend,
        max_file_mb=max_file_mb,
        watch_debounce=watch_debounce,
    )
    options = IngestOptions(
        dataset_id=dataset_id,
        name=name,
        description=description,
        model=s.model,
        query_prompt=query_prompt,
        document_prompt=document_prompt,
        backend=s.backend,
        cache_dir=s.cache_dir,
        chunk_tokens=chunk_tokens,
        overlap=overlap,
        include=include or (),
        exclude=exclude or (),
        code=code,
        keep_site_files=keep_site_files,
        keep_duplicates=keep_duplicates,
        language=language,
        follow_symlinks=follow_symlinks,
        max_file_bytes=int(s.max_file_mb * 1024 * 1024),
        default_top_k=top_k,
        full=full,
        dry_run=dry_run,
        embedding_store_mb=s.embedding_store_mb,
        wait=wait,
        replace=replace,
    )
    if watch and dry_run:
        raise typer.BadParameter("--dry-run plans one ingest; it cannot --watch", param_hint="--dry-run")
    if s.milvus_uri and (remote is None or dataset_id is not None):
        refuse_shadowed(path, dataset_id, s)
    fetch = (
        fetch_options(
            max_pages,
            max_requests,
            page_timeout,
            crawl_timeout,
            header,
            ref,
            subdir,
            git,
            recurse_submodules,
            options.max_file_bytes,
        )
        if remote
        else None
    )
    resumable: list[bool] = []  # whether the embedding store keeps what this run embeds
    try:
        with Progress(enabled=not quiet and not as_json) as progress:
            target = milvus_catalog(s) if s.milvus_uri else s.datasets_dir

            def announce(plan: IngestPlan) -> None:
                resumable.append(plan.stored)
                if progress.enabled and not dry_run and plan.to_embed > PLAN_SHOWN:
                    progress.say(plan_line(plan))

            if fetch is not None:
                from mcpower.sources.remote import ingest_source

                report = ingest_source(path, target, options, fetch, s.cache_dir, progress=progress, announce=announce)
            else:
                report = run_ingest(Path(path), target, options, progress=progress, announce=announce)
    except KeyboardInterrupt:
        kept = "; the chunks embedded so far are kept: run the same command again to resume" if any(resumable) else ""
        typer.echo(f"interrupted: nothing was published; the dataset is as it was before this ingest{kept}", err=True)
        raise typer.Exit(130) from None
    _show(report, as_json, compact=watch, dry_run=dry_run)
    if watch:
        from mcpower.cli.watching import watch_dataset

        # Watching re-ingests with the model this ingest loaded (the dataset's): loaded once for both.
        watch_dataset(
            report.dataset_id,
            Path(path),
            options,
            s,
            report.embedder,
            lambda r: _show(r, as_json, compact=True, location=False),
        )


def _show(
    report: IngestReport, as_json: bool, compact: bool = False, location: bool = True, dry_run: bool = False
) -> None:
    """The report: JSON (one line if ``compact``: one per re-ingest while watching) or text."""
    if as_json:
        data = {
            "dataset": report.dataset_id,
            "path": report.location,
            **{
                k: getattr(report, k)
                for k in ("documents", "chunks", "embedded", "added", "changed", "removed", "unchanged", "full_rebuild")
            },
            "from_store": report.plan.from_store,
            "published": report.published,
            "dry_run": dry_run,
            "plan": report.plan.as_dict(),
            "model": report.model,
            "model_reason": report.model_reason or None,
            "languages": report.languages,
            "language": report.language,
            "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
            "duplicates": [{"path": d.path, "kept": d.kept, "reason": d.why} for d in report.duplicates],
            "notes": [{"path": p, "note": n} for p, n in report.file_notes],
            "seconds": round(report.seconds, 2),
            "phases": {k: round(v, 2) for k, v in report.phases().items()},
            "chunks_per_second": round(report.chunks_per_second, 1),
        }
        if report.fetch is not None:
            data["fetch"] = fetch_json(report.fetch)
        typer.echo(json.dumps(data, ensure_ascii=False, indent=None if compact else 2))
        return
    show_fetch(report.fetch)
    furniture = furniture_counts(report.skipped)
    for rel, reason in report.skipped:
        if not is_furniture(reason):
            typer.echo(f"skipped {rel}: {reason}", err=True)
    if furniture:
        kinds = ", ".join(f"{n} {kind}" for kind, n in furniture.items())
        typer.echo(f"skipped as site furniture: {kinds} ({KEEP_HINT})", err=True)
    for line in duplicate_lines(report.duplicates):
        typer.echo(line, err=True)
    for rel, note in report.file_notes:
        typer.echo(f"note {rel}: {note}", err=True)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    if report.model_reason:
        typer.echo(f"model: {report.model} ({report.model_reason})", err=True)
    if dry_run:
        for line in dry_run_lines(report):
            typer.echo(line)
        return
    if report.rebuild_reason:
        typer.echo(f"full rebuild: {report.rebuild_reason}", err=True)
    if not report.published:
        typer.echo(f"{report.dataset_id}: nothing changed ({plural(report.documents, 'document')})")
        return
    embedded = (
        f"embedded {plural(report.embedded, 'chunk')} in {duration(report.embed_seconds)} "
        f"({rate(report.embedded, report.embed_seconds, 'chunks')})"
        if report.embedded
        else "nothing to embed"
    )
    if report.plan.from_store:
        embedded += f", {report.plan.from_store:,} from the embedding store"
    typer.echo(
        f"{report.dataset_id}: {plural(report.documents, 'document')}, {plural(report.chunks, 'chunk')} "
        f"({report.added} added, {report.changed} changed, {report.removed} removed, {report.unchanged} unchanged); "
        f"{embedded}"
    )
    if report.languages and not compact:
        shown = sorted(report.languages.items(), key=lambda t: (-t[1], t[0]))
        forced = f" (set with --language {report.language})" if report.language else ""
        typer.echo("languages (chunks): " + ", ".join(f"{code} {n}" for code, n in shown) + forced)
    if not compact:
        spent = ", ".join(f"{k} {duration(v)}" for k, v in report.phases().items() if v or k != "waiting")
        typer.echo(f"took {duration(report.seconds)}" + (f": {spent}" if spent else ""), err=True)
    if location:
        typer.echo(f"dataset: {report.location}")


def refuse_shadowed(path: str, dataset_id: str | None, s: Settings) -> None:
    """Refuse to write a dataset into Milvus under an id the datasets folder holds too: the
    folder's is served first, so the Milvus copy would never be.

    Raises:
        IngestError: the datasets folder has a dataset of that id.
    """
    from mcpower.errors import IngestError
    from mcpower.manifest import slugify
    from mcpower.store.local import LocalCatalog

    ds_id = dataset_id if dataset_id is not None else slugify(Path(path).expanduser().resolve().name)
    catalog = LocalCatalog(s.datasets_dir)
    if ds_id and catalog.contains(ds_id):
        raise IngestError(
            f"dataset {ds_id!r} is already in the datasets folder ({catalog.location(ds_id)}); a copy in Milvus "
            f"({s.milvus_uri}) would never be served, since mcpower serves the folder's first. Give this one "
            f"another id (--id {ds_id[:40]}-milvus), or remove that folder first to move the dataset to Milvus"
        )


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
