"""Assembling a version from a folder's files: read each one (carrying unchanged documents and
unchanged chunks' vectors over from the previous version), chunk it, embed the new chunks.

``ingestion.ingest`` runs this under the dataset's write lock and publishes what it returns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mcpower import embedding
from mcpower.analysis import chunk_languages
from mcpower.chunking import UnreadableError, size_limit
from mcpower.chunking.worker import ChunkingError, Reader
from mcpower.discover import SourceFile, read_document
from mcpower.duplicates import Duplicates
from mcpower.errors import IngestError
from mcpower.manifest import now_utc
from mcpower.plan import IngestPlan, ProgressCallback, embed_new
from mcpower.store import ChunkRow, DocumentRow, Store, chunk_id

if TYPE_CHECKING:
    from mcpower.embedding.store import EmbeddingStore
    from mcpower.ingestion import IngestOptions, IngestReport

logger = logging.getLogger(__name__)

# Chunks carried over per call: the vectors of one block are the only copy beside the dataset's own
# array (6 MB at 384 dimensions), whatever the dataset's size. (New chunks are embedded a slice at a
# time straight into it: mcpower/plan.py.)
VECTOR_BLOCK = 4096


def assemble(
    src: Path,
    files: list[SourceFile],
    opts: IngestOptions,
    emb: embedding.Embedder,
    chunk_tokens: int,
    overlap: int,
    reuse: Store | None,
    report: IngestReport,
    progress: ProgressCallback | None,
    language: str | None = None,
    *,
    store: Callable[[], EmbeddingStore | None] | None = None,
    announce: Callable[[IngestPlan], None] | None = None,
    reader: Reader,
) -> tuple[list[DocumentRow], list[ChunkRow], np.ndarray]:
    """The documents, chunks and vectors of the new version, each chunk with its language
    (``language`` forced, else detected: mcpower.analysis); files read with ``reader`` (the
    ingest's, which the ingest ends); ``report`` is filled in as it
    goes, and ``report.plan`` says what it did or, with ``opts.dry_run``, would do.

    Raises:
        IngestError: every file was skipped; the model gave non-finite vectors; the language
            detector cannot be loaded.
    """
    old: dict[str, tuple[DocumentRow, list[ChunkRow]]] = {}
    # Chunks carried over keep the language they were given, unless the setting that gave it changed
    # (or the previous version predates languages): then they are given one again, without re-embedding.
    relabel = True
    if reuse is not None:
        old = {d.path: (d, cs) for d, cs in reuse.iter_documents()}
        prev_analysis = reuse.info.analysis
        relabel = prev_analysis is None or prev_analysis.language != language
    docs: list[DocumentRow] = []
    chunks: list[ChunkRow] = []
    carried: list[int] = []  # chunk ids whose vectors come from the previous version
    to_embed: list[tuple[int, str]] = []  # (position in chunks, text to embed)
    status: list[str] = []  # per document: "unchanged", "touched", "changed" or "added"
    finder = Duplicates(f.rel for f in files)
    indexed_at = now_utc().isoformat()
    t0 = time.perf_counter()
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
            status.append("touched" if (d.size, d.mtime) != (size, mtime) else "unchanged")
            docs.append(dataclasses.replace(d, id=doc_id, size=size, mtime=mtime))
            langs = chunk_languages([c.text for c in cs], language) if relabel else [c.language for c in cs]
            for old_chunk, lang in zip(cs, langs):
                chunks.append(dataclasses.replace(old_chunk, document_id=doc_id, language=lang))
                carried.append(old_chunk.id)
            finder.add(f.rel, content_hash, d.content)
            continue
        try:
            document = reader.document(raw, suffix, Path(f.rel).name, emb.token_counter, chunk_tokens, overlap)
        except UnreadableError as e:
            report.skipped.append((f.rel, str(e)))
            continue
        except Exception as e:  # a chunker bug one file triggers must not stop the others being ingested
            logger.exception("cannot chunk %s", f.rel, extra={"event": "ingest.chunk_error"})
            kind = e.kind if isinstance(e, ChunkingError) else type(e).__name__
            report.skipped.append((f.rel, f"cannot be chunked ({kind}); please report this as a bug"))
            continue
        finally:
            del raw
        report.file_notes.extend((f.rel, note) for note in document.notes)
        docs.append(
            DocumentRow(doc_id, f.rel, document.title, suffix, size, mtime, content_hash, indexed_at, document.content)
        )
        finder.add(f.rel, content_hash, document.content)
        # An edited file keeps the vectors of its chunks whose text and headings did not change.
        kept = {(c.id, c.heading_path, c.text) for c in prev[1]} if prev is not None else set()
        seen: dict[str, int] = {}
        langs = chunk_languages([c.text for c in document.chunks], language)
        for c, lang in zip(document.chunks, langs):
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
                page_start=pages[0],
                page_end=pages[1],
                language=lang,
            )
            if (row.id, row.heading_path, row.text) in kept:
                carried.append(row.id)
            else:
                to_embed.append((len(chunks), c.embed_text))
            chunks.append(row)
        status.append("added" if prev is None else "changed")
    if not docs:
        report.read_seconds = time.perf_counter() - t0
        raise IngestError(f"{src.name}: every file was skipped — {skip_summary(report.skipped)}")
    content = {d.path: i for i, d in enumerate(docs)}
    found = [] if opts.keep_duplicates else finder.resolve(lambda rel: docs[content[rel]].content)
    report.duplicates.extend(found)
    # A duplicate the previous version held is removed from the dataset.
    dropped_indexed = [d.path for d in found if status[content[d.path]] != "added"]
    if found:
        docs, chunks, carried, to_embed, status = _without(
            {d.path for d in found}, docs, chunks, carried, to_embed, status
        )
    report.read_seconds = time.perf_counter() - t0
    counts = Counter(status)
    report.added, report.changed = counts["added"], counts["changed"]
    report.unchanged, report.touched = counts["unchanged"] + counts["touched"], counts["touched"]
    report.removed = len(old) + len(dropped_indexed)
    _check_unique([c.id for c in chunks])
    plan = report.plan
    plan.documents, plan.chunks = len(docs), len(chunks)
    plan.read, plan.unchanged = report.added + report.changed, report.unchanged + report.touched
    plan.duplicates, plan.skipped = len(report.duplicates), len(report.skipped)
    plan.carried, plan.removed = len(carried), sorted([*old, *dropped_indexed])
    # The dataset's vectors are held once: filled block by block, never built whole and then copied
    # (a million chunks' vectors are 1.5 GB).
    vectors = np.zeros((len(chunks), emb.dimension), dtype=np.float32)
    if reuse is not None and carried and not opts.dry_run:
        position = {c.id: i for i, c in enumerate(chunks)}
        for start in range(0, len(carried), VECTOR_BLOCK):
            reused = carried[start : start + VECTOR_BLOCK]
            vectors[[position[i] for i in reused]] = reuse.vectors(reused)
    t0 = time.perf_counter()
    report.embedded = embed_new(
        emb,
        [t for _, t in to_embed],
        vectors,
        [i for i, _ in to_embed],
        store,
        plan,
        reuse_stored=not opts.full,
        dry_run=opts.dry_run,
        progress=progress,
        announce=announce,
    )
    if report.embedded:
        report.embed_seconds = time.perf_counter() - t0
    if not opts.dry_run:
        for start in range(0, len(vectors), VECTOR_BLOCK):
            if not np.isfinite(vectors[start : start + VECTOR_BLOCK]).all():
                raise IngestError("the model produced non-finite vectors; the model files may be damaged")
    return docs, chunks, vectors


def _without(
    dropped: set[str],
    docs: list[DocumentRow],
    chunks: list[ChunkRow],
    carried: list[int],
    to_embed: list[tuple[int, str]],
    status: list[str],
) -> tuple[list[DocumentRow], list[ChunkRow], list[int], list[tuple[int, str]], list[str]]:
    """The lists without the documents at ``dropped`` paths (and their chunks), renumbered."""
    new_id: dict[int, int] = {}
    kept_docs: list[DocumentRow] = []
    kept_status: list[str] = []
    for d, st in zip(docs, status, strict=True):
        if d.path not in dropped:
            new_id[d.id] = len(kept_docs) + 1
            kept_docs.append(dataclasses.replace(d, id=new_id[d.id]))
            kept_status.append(st)
    embed_at = dict(to_embed)
    kept_chunks: list[ChunkRow] = []
    kept_embed: list[tuple[int, str]] = []
    for i, c in enumerate(chunks):
        if c.document_id in new_id:
            if i in embed_at:
                kept_embed.append((len(kept_chunks), embed_at[i]))
            kept_chunks.append(dataclasses.replace(c, document_id=new_id[c.document_id]))
    alive = {c.id for c in kept_chunks}
    return kept_docs, kept_chunks, [i for i in carried if i in alive], kept_embed, kept_status


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
