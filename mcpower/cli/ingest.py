"""`mcpower ingest`: build or update a dataset from a folder, with progress bars and a report."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcpower.cli.common import DatasetsDir, JsonFlag, WatchDebounce, milvus_catalog, settings, setup_logging
from mcpower.defaults import BACKENDS, DEFAULT_CHUNK_TOKENS, DEFAULT_MAX_FILE_MB, DEFAULT_OVERLAP

if TYPE_CHECKING:
    from mcpower.ingestion import IngestReport


def ingest(
    path: Annotated[
        Path,
        typer.Argument(help="Folder of documents (.md .mdx .txt .rst .html .pdf .docx .ipynb; code with --code)."),
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
        typer.Option(help="Embedding model: all-MiniLM-L6-v2 (packaged), a local folder or cached hub name."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help=f"Embedding backend: {', '.join(BACKENDS)} [env MCPOWER_BACKEND; default onnx].")
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
    top_k: Annotated[int | None, typer.Option("--default-top-k", min=1, max=100, help="Default result count.")] = None,
    follow_symlinks: Annotated[bool, typer.Option(help="Follow symlinks that lead outside the folder.")] = False,
    max_file_mb: Annotated[
        float | None,
        typer.Option(
            help=f"Skip files larger than this; PDF, Word and notebooks may be 10 times it "
            f"[env MCPOWER_MAX_FILE_MB; default {DEFAULT_MAX_FILE_MB:g}]."
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Rebuild everything instead of re-embedding changed files.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for another ingest of this dataset instead of failing.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="Then keep watching the folder and re-ingest on changes (Ctrl-C stops).")
    ] = False,
    watch_debounce: WatchDebounce = None,
    as_json: JsonFlag = False,
) -> None:
    """Build or update a dataset from a folder of documents (only changed files are re-embedded)."""
    from mcpower import embedding
    from mcpower.ingestion import IngestOptions
    from mcpower.ingestion import ingest as run_ingest

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
        backend=s.backend,
        cache_dir=s.cache_dir,
        chunk_tokens=chunk_tokens,
        overlap=overlap,
        include=include or (),
        exclude=exclude or (),
        code=code,
        follow_symlinks=follow_symlinks,
        max_file_bytes=int(s.max_file_mb * 1024 * 1024),
        default_top_k=top_k,
        full=full,
        wait=wait,
    )
    # Watching re-ingests with the same model: load it once for both.
    emb = embedding.load_embedder(s.model, s.backend, s.cache_dir) if watch else None
    with _Progress(enabled=not quiet and not as_json) as progress:
        target = milvus_catalog(s) if s.milvus_uri else s.datasets_dir
        report = run_ingest(path, target, options, embedder=emb, progress=progress)
    _show(report, as_json, compact=watch)
    if watch:
        from mcpower.cli.watching import watch_dataset

        watch_dataset(
            report.dataset_id, path, options, s, emb, lambda r: _show(r, as_json, compact=True, location=False)
        )


def _show(report: IngestReport, as_json: bool, compact: bool = False, location: bool = True) -> None:
    """The report: JSON (one line if ``compact``: one per re-ingest while watching) or text."""
    if as_json:
        data = {
            "dataset": report.dataset_id,
            "path": report.location,
            **{
                k: getattr(report, k)
                for k in ("documents", "chunks", "embedded", "added", "changed", "removed", "unchanged", "full_rebuild")
            },
            "published": report.published,
            "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
            "notes": [{"path": p, "note": n} for p, n in report.file_notes],
            "seconds": round(report.seconds, 2),
            "chunks_per_second": round(report.chunks_per_second, 1),
        }
        typer.echo(json.dumps(data, ensure_ascii=False, indent=None if compact else 2))
        return
    for rel, reason in report.skipped:
        typer.echo(f"skipped {rel}: {reason}", err=True)
    for rel, note in report.file_notes:
        typer.echo(f"note {rel}: {note}", err=True)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    if report.rebuild_reason:
        typer.echo(f"full rebuild: {report.rebuild_reason}", err=True)
    if not report.published:
        typer.echo(f"{report.dataset_id}: nothing changed ({report.documents} documents)")
        return
    typer.echo(
        f"{report.dataset_id}: {report.documents} documents, {report.chunks} chunks "
        f"({report.added} added, {report.changed} changed, {report.removed} removed, {report.unchanged} unchanged); "
        f"embedded {report.embedded} chunks in {report.seconds:.1f} s ({report.chunks_per_second:.0f} chunks/s)"
    )
    if location:
        typer.echo(f"dataset: {report.location}")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class _Progress:
    """tqdm bars on stderr for the ingest phases; silent when stderr is not a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.bars: dict[str, Any] = {}

    def __enter__(self) -> _Progress:
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(phase)
        if bar is None:
            bar = self.bars[phase] = tqdm(total=total, desc=phase, unit=phase[:-1], file=sys.stderr, leave=True)
        bar.update(done - bar.n)

    def __exit__(self, *exc: object) -> None:
        for bar in self.bars.values():
            bar.close()
