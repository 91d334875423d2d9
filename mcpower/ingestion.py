"""Ingest: discover -> chunk -> embed -> publish, crash-safe and incremental.

The new version is published through the dataset's catalog (for the local one, mcpower/layout.py:
a staging folder renamed into place, then the manifest replaced atomically), under the dataset's
write lock; a crash or Ctrl-C at any point leaves the previous version serving.

Re-ingesting an existing dataset with the same model and chunking re-embeds only files whose
content changed and carries the other vectors over.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpower import __version__, embedding, gitignore, model_choice
from mcpower.analysis import SCHEME, normalize_language
from mcpower.assembly import ProgressCallback, assemble, skip_summary
from mcpower.chunking import CHUNKER, SUPPORTED_TYPES
from mcpower.defaults import DEFAULT_BACKEND, DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP, DEFAULT_TOP_K, MAX_PROMPT_CHARS
from mcpower.discover import DEFAULT_MAX_FILE_BYTES, discover
from mcpower.errors import DatasetLockedError, IngestError
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
    Origin,
    SourceInfo,
    is_valid_id,
    now_utc,
    slugify,
)
from mcpower.provenance import check_same_source, source_record
from mcpower.results import ReindexCounts
from mcpower.store import Catalog, DatasetBuild
from mcpower.store.local import LocalCatalog

logger = logging.getLogger(__name__)

__all__ = ["IngestOptions", "IngestReport", "ProgressCallback", "fit_window", "ingest", "skip_summary"]


@dataclass(frozen=True)
class IngestOptions:
    """How to build a dataset; every field has the default `mcpower ingest` uses."""

    dataset_id: str | None = None  # default: the folder name as a slug
    name: str | None = None  # default: the folder name
    description: str | None = None  # default: the previous version's, else "Documents from <name>"
    # None: the previous version's model, else the one the documents' languages call for
    # (model_choice.py: all-MiniLM-L6-v2 for English, multilingual-e5-small for the rest).
    model: str | None = None
    # The prompts put before each query and document text; None: the model's own (its folder's
    # config_sentence_transformers.json), else the previous version's if it used this model.
    query_prompt: str | None = None
    document_prompt: str | None = None
    backend: str = DEFAULT_BACKEND
    cache_dir: Path | None = None  # where ONNX exports are cached (default: config.default_cache_dir())
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    overlap: int = DEFAULT_OVERLAP
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    code: bool = False  # also read source code (.py, .js, .go ...); an include glob naming a suffix does too
    keep_site_files: bool = False  # read a built site's furniture too (_sources, genindex ...: mcpower/sites.py)
    follow_symlinks: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    default_top_k: int | None = None  # default: the previous version's, else DEFAULT_TOP_K
    full: bool = False  # re-embed everything instead of carrying unchanged documents over
    wait: bool = False  # wait for another ingest of the dataset instead of failing
    # Publish nothing when no file was added, changed, removed or touched and no option changed: a
    # re-ingest (or a watcher's save) that changed nothing must not make a new version.
    skip_unchanged: bool = True
    # Rebuild the dataset from ``source`` even if it was built from another folder (without it,
    # that is an error: a folder name used twice must not silently replace the other dataset).
    replace: bool = False
    # The documents' language (an ISO 639 code, 'zh-CN' and 'DE' accepted): every chunk is taken
    # to be in it and nothing is detected; "auto" detects each chunk's; None: as the previous
    # version recorded (a forced language is kept by re-ingests and --watch), else "auto".
    language: str | None = None
    # Recorded as the source's options instead of the ones above (the watcher re-ingests within its
    # operator's limits, and keeps the record as the dataset's owner made it: watch/limits.py).
    source_record: SourceInfo | None = None
    # A fetched source (mcpower/sources/): where the folder came from, recorded with it.
    origin: Origin | None = None


@dataclass
class IngestReport:
    """What an ingest did, for the CLI summary and for tests."""

    dataset_id: str
    location: str  # where the dataset lives (its folder, for the local store)
    documents: int = 0
    chunks: int = 0
    embedded: int = 0  # chunks embedded in this run (the rest were carried over)
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    file_notes: list[tuple[str, str]] = field(default_factory=list)  # (relative path, how it was read)
    full_rebuild: bool = True
    rebuild_reason: str = ""
    seconds: float = 0.0
    # Each phase's own time (the total is ``seconds``): loading the model (a first ONNX export
    # included), waiting for another ingest (--wait), reading and chunking, embedding, writing.
    model_seconds: float = 0.0
    wait_seconds: float = 0.0
    read_seconds: float = 0.0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0
    touched: int = 0  # unchanged content, but another size or modification time: recorded anew
    published: bool = True  # False when skip_unchanged found nothing to publish
    notes: list[str] = field(default_factory=list)  # worth telling the user, not errors
    languages: dict[str, int] = field(default_factory=dict)  # chunks per language, as published
    language: str | None = None  # the language forced for every chunk, if one was (--language)
    model: str = ""  # the embedding model the dataset is built with
    model_reason: str = ""  # why that one, when it was chosen rather than named (model_choice.py)
    # The model loaded for this ingest, for a caller that goes on using it (`ingest --watch`).
    embedder: embedding.Embedder | None = field(default=None, repr=False, compare=False)
    fetch: Any = None  # a fetched source's report (sources.crawl.CrawlReport, sources.git.GitReport)

    def changes(self) -> ReindexCounts:
        """What this ingest changed, as a watcher reports its last re-index."""
        return ReindexCounts(
            added=self.added,
            changed=self.changed,
            removed=self.removed,
            embedded=self.embedded,
            seconds=round(self.seconds, 2),
        )

    @property
    def chunks_per_second(self) -> float:
        """Embedding speed: chunks embedded per second of the embedding phase alone."""
        return self.embedded / self.embed_seconds if self.embed_seconds else 0.0

    def phases(self) -> dict[str, float]:
        """Seconds per phase, for reports: model, waiting, reading, embedding, writing."""
        return {
            "model": self.model_seconds,
            "waiting": self.wait_seconds,
            "reading": self.read_seconds,
            "embedding": self.embed_seconds,
            "writing": self.write_seconds,
        }


def ingest(
    source: Path,
    target: Path | Catalog,
    options: IngestOptions | None = None,
    *,
    embedder: embedding.Embedder | None = None,
    progress: ProgressCallback | None = None,
) -> IngestReport:
    """Build (or update) the dataset for the folder ``source`` in ``target`` (a datasets folder or
    a catalog) and publish it atomically.

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
    if not files:
        raise IngestError(
            f"{source}: no documents to ingest (looked for {', '.join(sorted(SUPPORTED_TYPES))}"
            + (f"; {len(skipped)} skipped" if skipped else "")
            + ")"
        )
    for flag, prompt in (("--query-prompt", opts.query_prompt), ("--document-prompt", opts.document_prompt)):
        if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
            raise IngestError(f"{flag} is {len(prompt)} characters; a prompt takes at most {MAX_PROMPT_CHARS}")
    report = IngestReport(ds_id, catalog.location(ds_id), skipped=list(skipped))
    if opts.wait and progress is not None and _held_by_another(catalog, ds_id):
        progress("waiting", 0, 0)  # said before blocking; a plain `with`, so no lock outlives a Ctrl-C
    t0 = time.perf_counter()
    with catalog.lock(ds_id, opts.wait):
        report.wait_seconds = time.perf_counter() - t0
        previous = catalog.current(ds_id)
        try:
            if previous is not None and not opts.replace:
                check_same_source(ds_id, previous.info, src, opts.origin)
            t0 = time.perf_counter()
            prev_info = previous.info if previous is not None else None
            if embedder is not None:
                emb = model_choice.prompted(embedder, opts, prev_info)
            else:
                emb = model_choice.load_for_ingest(src, files, opts, prev_info, report)
            report.model_seconds = time.perf_counter() - t0
            report.model, report.embedder = emb.model_name, emb
            chunk_tokens, overlap = fit_window(chunk_tokens, overlap, emb.max_tokens, model_choice.prompt_tokens(emb))
            fingerprint = _fingerprint(emb, chunk_tokens, overlap)
            if previous is not None and not opts.full and previous.info.fingerprint != fingerprint:
                report.rebuild_reason = "the model or chunking settings changed"
            reuse = previous if previous is not None and not opts.full and not report.rebuild_reason else None
            report.full_rebuild = reuse is None
            language = _language(opts, previous.info if previous is not None else None)
            report.language = language
            docs, chunks, vectors = assemble(
                src, files, opts, emb, chunk_tokens, overlap, reuse, report, progress, language=language
            )
            if note := model_choice.coverage_note(emb, Counter(c.language for c in chunks)):
                report.notes.append(note)
            if not src.is_dir():  # deleted or renamed meanwhile: the files not read yet are not gone from it
                raise IngestError(f"{src.name}: the folder vanished while it was read; nothing was published")
            prev = previous.info if previous is not None else None
            now = now_utc()
            name = opts.name or src.name
            info = DatasetInfo(
                id=ds_id,
                name=(name.strip() or ds_id)[:128],
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
                chunking=ChunkingInfo(chunker=CHUNKER, chunk_tokens=chunk_tokens, overlap=overlap),
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
                source=source_record(src, opts, report),
                analysis=AnalysisInfo(scheme=SCHEME, language=language),
            )
            if opts.skip_unchanged and prev is not None and _nothing_changed(prev, info, report):
                report.published = False
                published = prev
            else:
                t0 = time.perf_counter()
                published = catalog.publish(DatasetBuild(info, docs, chunks, vectors))
                report.write_seconds = time.perf_counter() - t0
        finally:
            if previous is not None:
                previous.close()
    report.documents, report.chunks = published.counts.documents, published.counts.chunks
    report.languages = dict(published.counts.languages)
    report.seconds = time.perf_counter() - started
    return report


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
    precision = "int8" if emb.backend == "onnx-int8" else "fp32"
    key = f"{emb.model_fingerprint}|{emb.dimension}|{precision}|{CHUNKER}|{chunk_tokens}|{overlap}"
    if emb.query_prompt or emb.document_prompt:  # other prompts, other vectors (none: as before prompts)
        key += f"|{emb.query_prompt}|{emb.document_prompt}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]
