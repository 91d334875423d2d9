"""Ingest: discover -> chunk -> embed -> publish, crash-safe and incremental.

The new version is published through the dataset's catalog (for the local one, mcpower/layout.py:
a staging folder renamed into place, then the manifest replaced atomically), under the dataset's
write lock; a crash or Ctrl-C at any point leaves the previous version serving.

Re-ingesting an existing dataset with the same model and chunking re-embeds only files whose
content changed and carries the other vectors over. New vectors go to the embedding store as they
are made (mcpower/embedding/store.py), so an ingest interrupted before it publishes resumes there.
A file reached twice, or a text another document holds, is read once (mcpower/duplicates.py).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mcpower import __version__, embedding, gitignore, model_choice
from mcpower.analysis import SCHEME, normalize_language, undetermined_as
from mcpower.assembly import assemble, skip_summary
from mcpower.chunking import CHUNKER
from mcpower.chunking.worker import Reader
from mcpower.defaults import DEFAULT_TOP_K, MAX_PROMPT_CHARS, precision_of
from mcpower.discover import SourceFile, discover
from mcpower.duplicates import same_files
from mcpower.embedding.store import EmbeddingStore
from mcpower.env import default_cache_dir
from mcpower.errors import DatasetLockedError, IngestError
from mcpower.ingest_types import IngestOptions, IngestReport
from mcpower.manifest import (
    MAX_CHUNK_TOKENS,
    MAX_LANGUAGES,
    MAX_OVERLAP,
    MIN_CHUNK_TOKENS,
    AnalysisInfo,
    ChunkingInfo,
    Counts,
    DatasetInfo,
    EmbeddingInfo,
    is_valid_id,
    now_utc,
    slugify,
)
from mcpower.plan import IngestPlan, ProgressCallback
from mcpower.provenance import check_same_source, source_record
from mcpower.store import Catalog, ChunkRow, DatasetBuild, DocumentRow
from mcpower.store.local import LocalCatalog
from mcpower.unread import what_is_there

logger = logging.getLogger(__name__)

__all__ = ["IngestOptions", "IngestPlan", "IngestReport", "ProgressCallback", "fit_window", "ingest", "skip_summary"]


def ingest(
    source: Path,
    target: Path | Catalog,
    options: IngestOptions | None = None,
    *,
    embedder: embedding.Embedder | None = None,
    progress: ProgressCallback | None = None,
    announce: Callable[[IngestPlan], None] | None = None,
) -> IngestReport:
    """Build (or update) the dataset for the folder ``source`` in ``target`` (a datasets folder or
    a catalog) and publish it atomically; ``announce`` is told the plan once it is known, before
    the embedding (or after the first, timed, slice of it). With ``options.dry_run``, only plan:
    nothing is written, the lock is not taken, the report's ``plan`` says what would be done.

    Raises:
        IngestError: bad source folder or id, nothing to ingest, disk full.
        DatasetLockedError: another ingest of the same dataset is running.
        EmbeddingModelError: the model cannot be loaded.
    """
    started = time.perf_counter()
    opts = options or IngestOptions()
    catalog = LocalCatalog(target) if isinstance(target, Path) else target
    src = source.expanduser()
    if src.is_file():
        raise IngestError(
            f"{source} is a file; pass the folder it is in (with --include {src.name!r} to ingest only it)"
        )
    if not src.is_dir():
        raise IngestError(f"{source}: no such folder; pass the folder of documents to ingest")
    src = src.resolve()
    ds_id = opts.dataset_id if opts.dataset_id is not None else slugify(src.name)
    if opts.dataset_id is None and not is_valid_id(ds_id):
        raise IngestError(
            f"cannot derive a dataset id from the folder name {src.name[:80]!r}; "
            "pass one with --id (1-64 lowercase letters, digits and hyphens, e.g. --id my-docs)"
        )
    if not is_valid_id(ds_id):
        raise IngestError(
            f"invalid dataset id {ds_id[:80]!r}: use 1-64 lowercase letters, digits and hyphens (--id my-docs)"
        )
    chunk_tokens, overlap = opts.chunk_tokens, opts.overlap
    # The manifest's limits: checked here so a bad value fails before anything is embedded.
    if not MIN_CHUNK_TOKENS <= chunk_tokens <= MAX_CHUNK_TOKENS or not 0 <= overlap < min(
        chunk_tokens, MAX_OVERLAP + 1
    ):
        raise IngestError(
            f"--chunk-tokens must be {MIN_CHUNK_TOKENS}-{MAX_CHUNK_TOKENS} and --overlap 0-{MAX_OVERLAP} "
            f"and smaller than it (got {chunk_tokens}, {overlap})"
        )
    if opts.language is not None and opts.language != "auto" and normalize_language(opts.language) is None:
        raise IngestError(
            f"--language {opts.language[:40]!r}: not a language code mcpower knows; use an ISO 639-1 code "
            "such as en, de, fr, es, ru, ja, zh or ko, or auto to detect each chunk's language"
        )
    for flag, globs in (("--include", opts.include), ("--exclude", opts.exclude)):
        for glob in globs:
            if why := gitignore.problem(glob):  # git would drop it without a word; the user typed it
                raise IngestError(f"{flag} {glob[:80]!r}: {why}")
    skip_dirs = [target] if isinstance(target, Path) else []  # never ingest the datasets themselves
    files, skipped = discover(
        src,
        opts.include,
        opts.exclude,
        opts.follow_symlinks,
        opts.max_file_bytes,
        skip_dirs,
        code=opts.code,
        keep_site_files=opts.keep_site_files,
    )
    files, linked = same_files(files)
    if not files:
        why = what_is_there(src, skipped, skip_dirs) + (f"; skipped: {skip_summary(skipped)}" if skipped else "")
        raise IngestError(f"{source}: no documents to ingest — {why}")
    for flag, prompt in (("--query-prompt", opts.query_prompt), ("--document-prompt", opts.document_prompt)):
        if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
            raise IngestError(f"{flag} is {len(prompt)} characters; a prompt takes at most {MAX_PROMPT_CHARS}")
    report = IngestReport(ds_id, catalog.location(ds_id), skipped=list(skipped))
    report.duplicates.extend(linked)
    run = _Run(src, ds_id, catalog, files, opts, embedder, chunk_tokens, overlap, report)
    try:
        if opts.dry_run:  # without the lock: a plan of the version current now
            _version(run, progress, announce)
        else:
            if opts.wait and progress is not None and _held_by_another(catalog, ds_id):
                progress("waiting", 0, 0)  # said before blocking; a plain `with`, so no lock outlives a Ctrl-C
            t0 = time.perf_counter()
            with catalog.lock(ds_id, opts.wait):
                report.wait_seconds = time.perf_counter() - t0
                _version(run, progress, announce)
    finally:
        if run.store is not None:
            run.store.close()
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class _Run:
    """What one ingest's steps share."""

    src: Path
    ds_id: str
    catalog: Catalog
    files: list[SourceFile]
    opts: IngestOptions
    embedder: embedding.Embedder | None  # the caller's, else loaded for the documents (model_choice)
    chunk_tokens: int
    overlap: int
    report: IngestReport
    store: EmbeddingStore | None = None  # opened once the model is known


def _version(run: _Run, progress: ProgressCallback | None, announce: Callable[[IngestPlan], None] | None) -> None:
    """Assemble the new version against the current one and publish it (a dry run stops before
    embedding and publishes nothing); the report says what was done."""
    report, opts = run.report, run.opts
    previous = run.catalog.current(run.ds_id)
    # One reader for the ingest: the worker process that reads the model choice's sample reads the files.
    reader = Reader()
    try:
        if previous is not None and not opts.replace:
            check_same_source(run.ds_id, previous.info, run.src, opts.origin)
        t0 = time.perf_counter()
        prev_info = previous.info if previous is not None else None
        if run.embedder is not None:
            emb = model_choice.prompted(run.embedder, opts, prev_info)
        else:
            emb = model_choice.load_for_ingest(run.src, run.files, opts, prev_info, report, reader)
        report.model_seconds = time.perf_counter() - t0
        report.model, report.embedder = emb.model_name, emb
        run.chunk_tokens, run.overlap = fit_window(
            run.chunk_tokens, run.overlap, emb.max_tokens, model_choice.prompt_tokens(emb)
        )
        fingerprint = _fingerprint(emb, run.chunk_tokens, run.overlap)
        if previous is not None and not opts.full and previous.info.fingerprint != fingerprint:
            report.rebuild_reason = "the model or chunking settings changed"
        reuse = previous if previous is not None and not opts.full and not report.rebuild_reason else None
        report.full_rebuild = reuse is None

        def open_store() -> EmbeddingStore | None:  # only for a long embedding (plan.embed_new)
            if run.store is None and opts.embedding_store_mb > 0:
                run.store = EmbeddingStore.open(opts.cache_dir or default_cache_dir(), emb)
            return run.store

        language = report.language = _language(opts, previous.info if previous is not None else None)
        docs, chunks, vectors = assemble(
            run.src, run.files, opts, emb, run.chunk_tokens, run.overlap, reuse, report, progress, language,
            store=open_store, announce=announce, reader=reader,
        )  # fmt: skip
        reader.close()  # the worker process ends once every file is read
        if note := model_choice.coverage_note(emb, Counter(c.language for c in chunks)):
            report.notes.append(note)
        report.documents, report.chunks = len(docs), len(chunks)
        report.languages = dict(Counter(c.language for c in chunks).most_common(MAX_LANGUAGES))
        if previous is not None and reuse is None:  # a full rebuild: what goes is not known from the reuse
            report.plan.removed = sorted({d.path for d in previous.documents()} - {d.path for d in docs})
        if opts.dry_run:
            report.published = False
            return
        if not run.src.is_dir():  # deleted or renamed meanwhile: the files not read yet are not gone from it
            raise IngestError(f"{run.src.name}: the folder vanished while it was read; nothing was published")
        prev = previous.info if previous is not None else None
        info = _info(run, emb, docs, chunks, prev, fingerprint, language)
        if opts.skip_unchanged and prev is not None and _nothing_changed(prev, info, report):
            report.published = False
            published = prev
        else:
            t0 = time.perf_counter()
            published = run.catalog.publish(DatasetBuild(info, docs, chunks, vectors))
            report.write_seconds = time.perf_counter() - t0
        report.documents, report.chunks = published.counts.documents, published.counts.chunks
        report.languages = dict(published.counts.languages)
        if run.store is not None:
            run.store.trim(int(opts.embedding_store_mb * 1024 * 1024))
    finally:
        reader.close()
        if previous is not None:
            previous.close()


def _info(
    run: _Run,
    emb: embedding.Embedder,
    docs: list[DocumentRow],
    chunks: list[ChunkRow],
    prev: DatasetInfo | None,
    fingerprint: str,
    language: str | None,
) -> DatasetInfo:
    """What the manifest of the new version says."""
    opts = run.opts
    now = now_utc()
    name = opts.name or run.src.name
    return DatasetInfo(
        id=run.ds_id,
        name=(name.strip() or run.ds_id)[:128],
        description=(opts.description or (prev.description if prev else f"Documents from {name}"))[:512],
        default_top_k=opts.default_top_k or (prev.default_top_k if prev else DEFAULT_TOP_K),
        embedding=EmbeddingInfo.model_validate(  # validated: backend comes from the embedder at run time
            {
                "model": emb.model_name,
                "backend": emb.backend,
                "dimension": emb.dimension,
                "max_tokens": emb.max_tokens,
                "model_fingerprint": emb.model_fingerprint,
                "query_prompt": emb.query_prompt,
                "document_prompt": emb.document_prompt,
                "languages": sorted(emb.languages) if emb.languages is not None else None,
            }
        ),
        chunking=ChunkingInfo(chunker=CHUNKER, chunk_tokens=run.chunk_tokens, overlap=run.overlap),
        fingerprint=fingerprint,
        counts=Counts(
            documents=len(docs),
            chunks=len(chunks),
            file_types=dict(Counter(d.file_type for d in docs)),
            languages=dict(Counter(c.language for c in chunks).most_common(MAX_LANGUAGES)),
        ),
        created_at=prev.created_at if prev else now,
        updated_at=now,
        mcpower_version=__version__,
        source=source_record(run.src, opts, run.report),
        analysis=AnalysisInfo(
            scheme=SCHEME, language=language, undetermined=undetermined_as(Counter(c.language for c in chunks))
        ),
    )


def fit_window(chunk_tokens: int, overlap: int, max_tokens: int, prompt_tokens: int = 0) -> tuple[int, int]:
    """Chunk size and overlap that fit the model's window (two tokens go to its markers, and
    ``prompt_tokens`` to the document prompt).

    A larger chunk size is lowered, with a warning the CLI shows, and the overlap scaled with it
    (1000/500 on a 256-token model gives 254/127), so chunks keep the share the user asked for
    instead of being nearly all overlap.
    """
    window = max(max_tokens - 2 - prompt_tokens, MIN_CHUNK_TOKENS)
    if chunk_tokens <= window:
        return chunk_tokens, overlap
    scaled = min(overlap * window // chunk_tokens, window // 2)
    logger.warning(
        "--chunk-tokens %d is more than the model's window of %d tokens: chunks of %d tokens, overlap %d%s",
        chunk_tokens,
        max_tokens,
        window,
        scaled,
        f" (scaled from {overlap})" if scaled != overlap else "",
        extra={"event": "ingest.chunk_size_lowered"},
    )
    return window, scaled


def _language(opts: IngestOptions, prev: DatasetInfo | None) -> str | None:
    """The language forced for every chunk, or None to detect each one's: ``--language``, else the
    previous version's record (so re-ingests and --watch keep what the user chose)."""
    if opts.language is None:
        return prev.analysis.language if prev is not None and prev.analysis is not None else None
    return None if opts.language == "auto" else normalize_language(opts.language)


def _held_by_another(catalog: Catalog, ds_id: str) -> bool:
    """Whether another ingest holds the dataset's lock right now (taken and let go at once)."""
    try:
        with catalog.lock(ds_id, False):
            return False
    except DatasetLockedError:
        return True


def _nothing_changed(prev: DatasetInfo, info: DatasetInfo, report: IngestReport) -> bool:
    """Whether publishing ``info`` would only restamp the previous version ``prev``."""
    if report.full_rebuild or report.added or report.changed or report.removed or report.touched:
        return False
    ignored = {"updated_at", "mcpower_version"}
    before = prev.model_dump(include=set(DatasetInfo.model_fields) - ignored)
    after = info.model_dump(exclude=ignored)
    for record in (before, after):  # a fetch that found nothing new is no new version
        if record.get("source") and record["source"].get("origin"):
            record["source"]["origin"].pop("fetched_at", None)
    return before == after


def _fingerprint(emb: embedding.Embedder, chunk_tokens: int, overlap: int) -> str:
    # torch and onnx fp32 give the same vectors; int8 does not, so precision is part of identity.
    key = f"{emb.model_fingerprint}|{emb.dimension}|{precision_of(emb.backend)}|{CHUNKER}|{chunk_tokens}|{overlap}"
    if emb.query_prompt or emb.document_prompt:  # other prompts, other vectors (none: as before prompts)
        key += f"|{emb.query_prompt}|{emb.document_prompt}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]
