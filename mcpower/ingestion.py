"""Ingest: discover -> chunk -> embed -> publish, crash-safe and incremental.

The new version is published through the dataset's catalog (for the local one, mcpower/layout.py:
a staging folder renamed into place, then the manifest replaced atomically), under the dataset's
write lock; a crash or Ctrl-C at any point leaves the previous version serving.

Re-ingesting an existing dataset with the same model and chunking re-embeds only files whose
content changed and carries the other vectors over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from mcpower import __version__, embedding, gitignore
from mcpower.chunking import CHUNKER, SUPPORTED_TYPES, UnreadableError, build_document, size_limit
from mcpower.chunking.worker import Reader
from mcpower.defaults import DEFAULT_BACKEND, DEFAULT_CHUNK_TOKENS, DEFAULT_MODEL, DEFAULT_OVERLAP, DEFAULT_TOP_K
from mcpower.discover import DEFAULT_MAX_FILE_BYTES, SourceFile, discover, read_document
from mcpower.errors import IngestError
from mcpower.manifest import (
    MAX_CHUNK_TOKENS,
    MAX_OVERLAP,
    MIN_CHUNK_TOKENS,
    ChunkingInfo,
    Counts,
    DatasetInfo,
    EmbeddingInfo,
    SourceInfo,
    is_valid_id,
    now_utc,
    slugify,
)
from mcpower.store import Catalog, ChunkRow, DatasetBuild, DocumentRow, Store, chunk_id
from mcpower.store.local import LocalCatalog

logger = logging.getLogger(__name__)

# (phase, done, total): phases are "files" and "chunks"
ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class IngestOptions:
    """How to build a dataset; every field has the default `mcpower ingest` uses."""

    dataset_id: str | None = None  # default: the folder name as a slug
    name: str | None = None  # default: the folder name
    description: str | None = None  # default: the previous version's, else "Documents from <name>"
    model: str = DEFAULT_MODEL
    backend: str = DEFAULT_BACKEND
    cache_dir: Path | None = None  # where ONNX exports are cached (default: config.default_cache_dir())
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    overlap: int = DEFAULT_OVERLAP
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    code: bool = False  # also read source code (.py, .js, .go ...); an include glob naming a suffix does too
    follow_symlinks: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    default_top_k: int | None = None  # default: the previous version's, else DEFAULT_TOP_K
    full: bool = False  # re-embed everything instead of carrying unchanged documents over
    wait: bool = False  # wait for another ingest of the dataset instead of failing
    # Publish nothing when no file was added, changed, removed or touched (the watcher's re-ingests:
    # a save that changed nothing must not make a new version).
    skip_unchanged: bool = False


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
    embed_seconds: float = 0.0
    touched: int = 0  # unchanged content, but another size or modification time: recorded anew
    published: bool = True  # False when skip_unchanged found nothing to publish
    notes: list[str] = field(default_factory=list)  # worth telling the user, not errors

    @property
    def chunks_per_second(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0


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
    for flag, globs in (("--include", opts.include), ("--exclude", opts.exclude)):
        for glob in globs:
            if why := gitignore.problem(glob):  # git would drop it without a word; the user typed it
                raise IngestError(f"{flag} {glob[:80]!r}: {why}")
    skip_dirs = [target] if isinstance(target, Path) else []  # never ingest the datasets themselves
    files, skipped = discover(
        src, opts.include, opts.exclude, opts.follow_symlinks, opts.max_file_bytes, skip_dirs, code=opts.code
    )
    if not files:
        raise IngestError(
            f"{source}: no documents to ingest (looked for {', '.join(sorted(SUPPORTED_TYPES))}"
            + (f"; {len(skipped)} skipped" if skipped else "")
            + ")"
        )
    emb = embedder or embedding.load_embedder(opts.model, opts.backend, opts.cache_dir)
    if chunk_tokens > emb.max_tokens - 2:
        logger.info("chunk size %d lowered to the model window %d", chunk_tokens, emb.max_tokens - 2)
        chunk_tokens = emb.max_tokens - 2
        overlap = min(overlap, chunk_tokens - 1)
    report = IngestReport(ds_id, catalog.location(ds_id), skipped=list(skipped))
    with catalog.lock(ds_id, opts.wait):
        previous = catalog.current(ds_id)
        try:
            fingerprint = _fingerprint(emb, chunk_tokens, overlap)
            if previous is not None and not opts.full and previous.info.fingerprint != fingerprint:
                report.rebuild_reason = "the model or chunking settings changed"
            reuse = previous if previous is not None and not opts.full and not report.rebuild_reason else None
            report.full_rebuild = reuse is None
            docs, chunks, vectors = _build(src, files, opts, emb, chunk_tokens, overlap, reuse, report, progress)
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
                    }
                ),
                chunking=ChunkingInfo(chunker=CHUNKER, chunk_tokens=chunk_tokens, overlap=overlap),
                fingerprint=fingerprint,
                counts=Counts(
                    documents=len(docs), chunks=len(chunks), file_types=dict(Counter(d.file_type for d in docs))
                ),
                created_at=prev.created_at if prev else now,
                updated_at=now,
                mcpower_version=__version__,
                source=_source_record(src, opts, report),
            )
            if opts.skip_unchanged and prev is not None and _nothing_changed(prev, info, report):
                report.published = False
                published = prev
            else:
                published = catalog.publish(DatasetBuild(info, docs, chunks, vectors))
        finally:
            if previous is not None:
                previous.close()
    report.documents, report.chunks = published.counts.documents, published.counts.chunks
    report.seconds = time.perf_counter() - started
    return report


def _source_record(src: Path, opts: IngestOptions, report: IngestReport) -> SourceInfo | None:
    """What the manifest records of the source folder and the options that select its files."""
    try:
        return SourceInfo(
            path=str(src),
            include=tuple(opts.include),
            exclude=tuple(opts.exclude),
            follow_symlinks=opts.follow_symlinks,
            max_file_bytes=opts.max_file_bytes,
        )
    except ValidationError as e:
        where, msg = ".".join(str(x) for x in e.errors()[0]["loc"]), e.errors()[0]["msg"]
        reason = f"{where}: {msg}" if where else msg
        report.notes.append(f"source folder not recorded ({reason[:200]}): `serve --watch` cannot watch this dataset")
        return None


def _nothing_changed(prev: DatasetInfo, info: DatasetInfo, report: IngestReport) -> bool:
    """Whether publishing ``info`` would only restamp the previous version ``prev``."""
    if report.full_rebuild or report.added or report.changed or report.removed or report.touched:
        return False
    ignored = {"updated_at", "mcpower_version"}
    return prev.model_dump(include=set(DatasetInfo.model_fields) - ignored) == info.model_dump(exclude=ignored)


def _fingerprint(emb: embedding.Embedder, chunk_tokens: int, overlap: int) -> str:
    # torch and onnx fp32 give the same vectors; int8 does not, so precision is part of identity.
    precision = "int8" if emb.backend == "onnx-int8" else "fp32"
    key = f"{emb.model_fingerprint}|{emb.dimension}|{precision}|{CHUNKER}|{chunk_tokens}|{overlap}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _build(
    src: Path,
    files: list[SourceFile],
    opts: IngestOptions,
    emb: embedding.Embedder,
    chunk_tokens: int,
    overlap: int,
    reuse: Store | None,
    report: IngestReport,
    progress: ProgressCallback | None,
) -> tuple[list[DocumentRow], list[ChunkRow], np.ndarray]:
    old: dict[str, tuple[DocumentRow, list[ChunkRow]]] = {}
    if reuse is not None:
        old = {d.path: (d, cs) for d, cs in reuse.iter_documents()}
    docs: list[DocumentRow] = []
    chunks: list[ChunkRow] = []
    carried: list[int] = []  # chunk ids whose vectors come from the previous version
    to_embed: list[tuple[int, str]] = []  # (position in chunks, text to embed)
    indexed_at = now_utc().isoformat()
    with Reader() as reader:
        for n, f in enumerate(files, 1):
            if progress:
                progress("files", n, len(files))
            suffix = Path(f.rel).suffix.lower()
            try:
                raw, st = read_document(f, size_limit(suffix, opts.max_file_bytes))
                size, mtime = st.st_size, st.st_mtime  # as read: a file rewritten since it was listed counts as read
            except OSError as e:
                report.skipped.append((f.rel, f"cannot read: {e.strerror}"))
                continue
            content_hash = hashlib.sha256(raw).hexdigest()
            doc_id = len(docs) + 1
            prev = old.pop(f.rel, None)
            if prev is not None and prev[0].content_hash == content_hash:
                d, cs = prev
                if (d.size, d.mtime) != (size, mtime):
                    report.touched += 1
                docs.append(dataclasses.replace(d, id=doc_id, size=size, mtime=mtime))
                for old_chunk in cs:
                    chunks.append(dataclasses.replace(old_chunk, document_id=doc_id))
                    carried.append(old_chunk.id)
                report.unchanged += 1
                continue
            try:
                parsed = reader.read(raw, suffix)
            except UnreadableError as e:
                report.skipped.append((f.rel, str(e)))
                continue
            del raw
            try:
                document = build_document(parsed, Path(f.rel).name, emb.count_tokens, chunk_tokens, overlap)
            except Exception as e:  # a chunker bug one file triggers must not stop the others being ingested
                logger.exception("cannot chunk %s", f.rel, extra={"event": "ingest.chunk_error"})
                report.skipped.append((f.rel, f"cannot be chunked ({type(e).__name__}); please report this as a bug"))
                continue
            report.file_notes.extend((f.rel, note) for note in document.notes)
            docs.append(
                DocumentRow(
                    doc_id, f.rel, document.title, suffix, size, mtime, content_hash, indexed_at, document.content
                )
            )
            # An edited file keeps the vectors of its chunks whose text and headings did not change.
            kept = {(c.id, c.heading_path, c.text) for c in prev[1]} if prev is not None else set()
            seen: dict[str, int] = {}
            for c in document.chunks:
                occurrence = seen.get(c.text, 0)
                seen[c.text] = occurrence + 1
                pages = c.pages or (None, None)
                row = ChunkRow(
                    chunk_id(f.rel, c.text, occurrence),
                    doc_id,
                    c.ordinal,
                    c.heading,
                    c.start_line,
                    c.end_line,
                    c.text,
                    *pages,
                )
                if (row.id, row.heading_path, row.text) in kept:
                    carried.append(row.id)
                else:
                    to_embed.append((len(chunks), c.embed_text))
                chunks.append(row)
            if prev is None:
                report.added += 1
            else:
                report.changed += 1
    report.removed = len(old)
    if not docs:
        raise IngestError(f"{src.name}: every file was skipped — {skip_summary(report.skipped)}")
    _check_unique([c.id for c in chunks])
    vectors = np.zeros((len(chunks), emb.dimension), dtype=np.float32)
    if reuse is not None and carried:
        position = {c.id: i for i, c in enumerate(chunks)}
        vectors[[position[i] for i in carried]] = reuse.vectors(carried)
    if to_embed:
        t0 = time.perf_counter()
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress("chunks", done, len(to_embed))

        vectors[[i for i, _ in to_embed]] = emb.embed_documents([t for _, t in to_embed], progress=tick)
        report.embed_seconds = time.perf_counter() - t0
    report.embedded = len(to_embed)
    if not np.isfinite(vectors).all():
        raise IngestError("the model produced non-finite vectors; the model files may be damaged")
    return docs, chunks, vectors


def skip_summary(skipped: list[tuple[str, str]], examples: int = 3) -> str:
    """What was skipped, by reason: 'not UTF-8 (2 files: a.md, b.md); binary file (1 file: c.md)'."""
    by_reason: dict[str, list[str]] = {}
    for path, reason in skipped:
        by_reason.setdefault(reason.split(" (byte ")[0], []).append(path)
    parts = []
    for reason, paths in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(paths[:examples]) + (", ..." if len(paths) > examples else "")
        parts.append(f"{reason} ({len(paths)} file{'s' if len(paths) != 1 else ''}: {shown})")
    return "; ".join(parts)


def _check_unique(ids: list[int]) -> None:
    if len(set(ids)) != len(ids):  # 63-bit hashes: only two identical (path, text, occurrence) collide
        raise IngestError("two chunks got the same id; please report this as a bug")
