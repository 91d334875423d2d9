"""The local store, reading: one published version — FAISS vectors plus a SQLite database — loaded.

FAISS ids are chunk ids, so a vector hit leads to its chunk and a chunk to its vector. Files are
verified against the manifest's sha256 before they are used; a published version is never
modified, so a loaded store stays consistent while newer versions are published beside it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.analysis import query_languages, query_terms
from mcpower.checksums import FileHashes
from mcpower.errors import IndexMismatchError, InvalidManifestError
from mcpower.layout import resolve_inside
from mcpower.manifest import DatasetInfo, Manifest
from mcpower.results import SearchFilters
from mcpower.store import ChunkHit, ChunkRow, DocumentRow, DocumentSummary
from mcpower.store.faiss_file import check_index_file
from mcpower.store.local.filters import FilterCache
from mcpower.store.local.fts import query_phrases
from mcpower.store.local.keyword import COLUMN_WEIGHTS, chunk_ids, read_postings_by_term
from mcpower.store.local.places import Places, read_rows
from mcpower.store.local.pool import ConnectionPool
from mcpower.store.local.postings import PostingsCache, RankedMatches, fts_postings, postings_of
from mcpower.store.local.schema import (
    CHUNKS,
    DOCUMENTS,
    FTS,
    check_schema,
    has_postings,
    hit_sql,
    missing_columns,
    select_sql,
)
from mcpower.store.local.vectors import VectorFile, VectorSide

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)


class LocalStore:
    """A loaded, verified dataset version: vector search, keyword search and lookups by chunk id.

    Thread-safe: FAISS searches run in parallel, and so do SQLite reads, each on a connection of
    its own (the pool's).
    """

    def __init__(
        self,
        manifest: DatasetInfo,
        folder: Path,
        index: Any,
        db: sqlite3.Connection | ConnectionPool,
        ids: NDArray[np.int64],
        postings: bool,
        missing: frozenset[str] = frozenset(),
        hnsw: bool = False,
        floats: VectorFile | None = None,
    ) -> None:
        self.manifest = manifest  # a Manifest, or the DatasetInfo of a store built in memory (store/original/)
        self.folder = folder
        self._index = index
        # The vector side: FAISS, and an hnsw_sq version's exact vectors (vectors.py).
        self._vectors = VectorSide(index, ids, floats, hnsw)
        # A lone connection serves its readers in turn; a pool opens one per concurrent reader.
        self._db = db if isinstance(db, ConnectionPool) else ConnectionPool(None, db)
        self._ids = ids  # every chunk id, ascending: the rows of the keyword postings
        self._postings = postings  # False for a database written before postings existed: FTS5 scores all
        # Chunk columns a database written before them lacks (pages, language): read as their defaults.
        self._missing = missing
        self._hit_sql = hit_sql(missing)
        self._place_sql = hit_sql(missing, text=False)  # the same rows without their text
        self._places = Places(len(ids), read_rows(self._db.connection, self._place_sql))  # a small dataset's, in memory
        self._filters = FilterCache(ids, self._db)  # the chunks each recent filter allows
        self._postings_cache = PostingsCache(len(ids))  # the common terms' long postings, once read
        # The languages a query is analysed under (the dataset's), or None: the keyword index was
        # made by FTS5's tokenizer (a dataset written before analysis, or of the original format).
        analysis = manifest.analysis
        self._languages = (
            query_languages(manifest.counts.languages, analysis.undetermined)
            if analysis is not None and analysis.scheme is not None
            else None
        )

    @property
    def info(self) -> DatasetInfo:
        return self.manifest

    @property
    def id(self) -> str:
        return self.manifest.id

    def close(self) -> None:
        self._db.close()
        self._vectors.close()

    # -- search

    def semantic(
        self, vector: NDArray[np.float32], k: int, where: SearchFilters | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, cosine) pairs, best first, among the chunks ``where`` allows."""
        return self._vectors.search(vector, k, self._filters.allowed(where))

    def keyword(self, query: str, where: SearchFilters | None = None) -> RankedMatches:
        """Every chunk ``where`` allows that holds a term of ``query``, with its BM25 (as FTS5 scores
        it), scored as far as asked (postings.py: the top k by MaxScore, or given chunks' scores).

        Raises:
            IndexMismatchError: the postings do not fit the chunk table.
        """
        if self._languages is not None:  # analysed: every term is one token, scored from its postings
            terms = query_terms(query, self._languages)
            single = terms if self._postings else []
            by_fts = [] if self._postings else [f'"{t}"' for t in terms]
        else:  # indexed by FTS5's Porter tokenizer: the query is tokenized by it too
            phrases = query_phrases(query)
            single = [p.tokens[0] for p in phrases if self._postings and len(p.tokens) == 1]
            by_fts = [p.fts for p in phrases if not (self._postings and len(p.tokens) == 1)]
        allowed = self._filters.allowed(where)
        known = {t: found for t in single if (found := self._postings_cache.get(t)) is not None}
        with self._db.connection() as db:
            blobs = read_postings_by_term(db, [t for t in dict.fromkeys(single) if t not in known])
            fts_scores = (
                db.execute(
                    f"SELECT rowid, -bm25({FTS}, ?, ?, ?) FROM {FTS} WHERE {FTS} MATCH ?",
                    (*COLUMN_WEIGHTS, " OR ".join(by_fts)),
                ).fetchall()
                if by_fts
                else []
            )
        try:
            for term, pair in blobs.items():
                known[term] = postings_of(pair, len(self._ids))
                self._postings_cache.put(term, known[term])
            lists = [known[t] for t in single if t in known]  # in query order, as combine() adds them
            if fts_scores:
                lists.append(fts_postings(self._ids, fts_scores))
        except ValueError as e:
            source = self.manifest.metadata if isinstance(self.manifest, Manifest) else "keyword index"
            raise IndexMismatchError(f"{self.id}: {source}: {e}; re-run `mcpower ingest`") from e
        return RankedMatches(self._ids, lists, allowed.rows if allowed is not None else None)

    # -- lookups

    def chunks(self, ids: Sequence[int], text: bool = True) -> dict[int, ChunkHit]:
        """The chunks with these ids (unknown ids are simply absent); without ``text``, their text is ''."""
        if not ids:
            return {}
        places = None if text else self._places.table()
        if places is not None:
            return {i: places[i] for i in ids if i in places}
        marks = ",".join("?" * len(ids))
        sql = self._hit_sql if text else self._place_sql
        with self._db.connection() as db:
            rows = db.execute(f"{sql} WHERE c.id IN ({marks})", list(ids)).fetchall()
        return {hit.id: hit for hit in map(ChunkHit.of_row, rows)}

    def neighbors(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        """The chunks of ``hit``'s document from ``before`` ahead of it to ``after`` behind it, in order."""
        with self._db.connection() as db:
            rows = db.execute(
                f"{self._hit_sql} WHERE c.document_id = ? AND c.ordinal BETWEEN ? AND ? ORDER BY c.ordinal",
                (hit.document_id, hit.ordinal - before, hit.ordinal + after),
            ).fetchall()
        return [ChunkHit.of_row(r) for r in rows]

    def chunk_count(self, document_id: int) -> int:
        with self._db.connection() as db:
            row = db.execute(f"SELECT count(*) FROM {CHUNKS} WHERE document_id = ?", (document_id,)).fetchone()
        return int(row[0])

    def document(self, path: str) -> DocumentRow | None:
        return self._document("path", path)

    def document_by_id(self, document_id: int) -> DocumentRow | None:
        return self._document("id", document_id)

    def _document(self, column: str, value: object) -> DocumentRow | None:
        with self._db.connection() as db:
            row = db.execute(f"{select_sql(DOCUMENTS, DocumentRow)} WHERE {column} = ?", (value,)).fetchone()
        return DocumentRow(*row) if row else None

    def documents(self, limit: int | None = None) -> list[DocumentSummary]:
        """Every document, by path; given ``limit``, the first ``limit`` by id (the primary key: only
        those rows are read), by path."""
        columns = "path, title, file_type, size, mtime"
        sql = f"SELECT {columns} FROM {DOCUMENTS} ORDER BY path"
        if limit is not None:
            sql = f"SELECT * FROM (SELECT {columns} FROM {DOCUMENTS} ORDER BY id LIMIT ?) ORDER BY path"
        with self._db.connection() as db:
            rows = db.execute(sql, () if limit is None else (max(limit, 0),)).fetchall()
        return [DocumentSummary(*r) for r in rows]

    def iter_documents(self) -> Iterator[tuple[DocumentRow, list[ChunkRow]]]:
        """Every document with its chunks in order (for incremental re-ingest)."""
        with self._db.connection() as db:
            docs = [DocumentRow(*r) for r in db.execute(select_sql(DOCUMENTS, DocumentRow))]
            chunk_rows = [
                ChunkRow(*r)
                for r in db.execute(f"{select_sql(CHUNKS, ChunkRow, self._missing)} ORDER BY document_id, ordinal")
            ]
        by_doc: dict[int, list[ChunkRow]] = {}
        for c in chunk_rows:
            by_doc.setdefault(c.document_id, []).append(c)
        for d in docs:
            yield d, by_doc.get(d.id, [])

    def vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        """The stored vectors of these chunk ids, in order."""
        if not ids:
            return np.zeros((0, self.manifest.embedding.dimension), dtype=np.float32)
        return self._vectors.vectors(ids)


def open_store(folder: Path, manifest: Manifest, verify: bool = True, hashes: FileHashes | None = None) -> LocalStore:
    """Load the dataset version ``manifest`` points at, after checking it against the manifest.

    Each file is opened once (no symlink followed at the last step, without blocking); its
    checksum is taken from that descriptor (remembered per file identity by ``hashes``) and the
    engines read the same open file through ``/proc/self/fd`` where there is one, so what was
    verified is what is loaded.

    Raises:
        InvalidManifestError: a path escapes the folder or is not a regular file.
        IndexMismatchError: checksum, count or dimension disagree with the manifest, or a file is corrupt.
    """
    import faiss

    name = manifest.id
    hashes = hashes or FileHashes(None)
    with _Opened(folder, manifest.index) as index_fd, _Opened(folder, manifest.metadata) as meta_fd:
        if verify and hashes.sha256_fd(index_fd.fd) != manifest.checksums.index:
            raise IndexMismatchError(f"{name}: {manifest.index} does not match its checksum; re-run `mcpower ingest`")
        if verify and hashes.sha256_fd(meta_fd.fd) != manifest.checksums.metadata:
            raise IndexMismatchError(
                f"{name}: {manifest.metadata} does not match its checksum; re-run `mcpower ingest`"
            )
        try:  # FAISS allocates what the file's length fields say: they are checked against its size first
            layout = check_index_file(index_fd.fd)
        except (ValueError, OSError) as e:
            raise IndexMismatchError(f"{name}: {manifest.index} is not a readable FAISS index ({e})") from e
        if layout.dimension != manifest.embedding.dimension:
            raise IndexMismatchError(
                f"{name}: index dimension {layout.dimension} != model dimension {manifest.embedding.dimension}"
            )
        if layout.kind != manifest.vector_index.kind:
            raise IndexMismatchError(
                f"{name}: a {layout.kind} index, but the manifest says {manifest.vector_index.kind}"
            )
        index: Any
        try:
            # Read by FAISS from the file: holding the bytes to hash and deserialise them cost three
            # copies of the index in memory (5.4 GB at 1M chunks).
            index = faiss.read_index(index_fd.name)
        except Exception as e:  # faiss raises RuntimeError with C++ text for any corruption
            raise IndexMismatchError(f"{name}: {manifest.index} is not a readable FAISS index") from e
        if manifest.vector_index.kind in ("hnsw", "hnsw_sq") and manifest.vector_index.ef_search:
            hnsw: Any = faiss.downcast_index(index.index)
            hnsw.hnsw.efSearch = manifest.vector_index.ef_search
        db: sqlite3.Connection | None = None
        try:
            # immutable=1: published versions never change, so SQLite may skip locking entirely.
            db = sqlite3.connect(f"{meta_fd.uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            check_schema(db)
            n_chunks, n_docs = db.execute(
                f"SELECT (SELECT count(*) FROM {CHUNKS}), (SELECT count(*) FROM {DOCUMENTS})"
            ).fetchone()
            ids = _ascending_ids(index, db)
            postings = has_postings(db)
            missing = missing_columns(db)
        except sqlite3.Error as e:
            if db is not None:
                db.close()
            raise IndexMismatchError(f"{name}: {manifest.metadata} is not a readable SQLite database ({e})") from e
        pool = _reader_pool(meta_fd, db, f"{name}: {manifest.metadata}")
    if not (index.ntotal == n_chunks == manifest.counts.chunks == len(ids)) or n_docs != manifest.counts.documents:
        pool.close()
        raise IndexMismatchError(
            f"{name}: counts disagree (index {index.ntotal} vectors, database {n_chunks} chunks / "
            f"{n_docs} documents, manifest {manifest.counts.chunks} / {manifest.counts.documents})"
        )
    try:
        floats = _open_floats(folder, manifest, hashes, verify)
        return LocalStore(
            manifest, folder, index, pool, ids, postings, missing, manifest.vector_index.kind != "flat", floats
        )
    except BaseException:
        pool.close()
        raise


def _open_floats(folder: Path, manifest: Manifest, hashes: FileHashes, verify: bool) -> VectorFile | None:
    """The exact vectors of an hnsw_sq version, checked (checksum, then size against the counts).

    Raises:
        IndexMismatchError: they do not match.
    """
    if manifest.vectors is None:
        return None
    with _Opened(folder, manifest.vectors) as opened:
        if verify and hashes.sha256_fd(opened.fd) != manifest.checksums.vectors:
            raise IndexMismatchError(
                f"{manifest.id}: {manifest.vectors} does not match its checksum; re-run `mcpower ingest`"
            )
        fd = os.dup(opened.fd)
    try:
        return VectorFile(fd, manifest.counts.chunks, manifest.embedding.dimension)
    except ValueError as e:
        os.close(fd)
        raise IndexMismatchError(f"{manifest.id}: {manifest.vectors} is not the version's vectors ({e})") from e


def _ascending_ids(index: Any, db: sqlite3.Connection) -> NDArray[np.int64]:
    """Every chunk id, ascending: from the index's id map (in memory already); reading them from
    the chunks table means reading every chunk's text (0.77 s at 100k chunks from a cold cache)."""
    import faiss

    id_map = getattr(index, "id_map", None)
    if id_map is not None:
        return np.sort(faiss.vector_to_array(id_map).astype(np.int64, copy=False))
    return chunk_ids(db)


def _reader_pool(opened: _Opened, first: sqlite3.Connection, source: str) -> ConnectionPool:
    """Connections to the verified database for concurrent readers: opened through a descriptor of
    its own (``/proc/self/fd``) where there is one, so they read the very file that was checked;
    ``source`` names it in errors."""
    if opened.name.startswith("/proc/self/fd/"):
        fd = os.dup(opened.fd)
        return ConnectionPool(f"file:/proc/self/fd/{fd}?mode=ro&immutable=1", first, keep_fd=fd, source=source)
    return ConnectionPool(f"{opened.uri}?mode=ro&immutable=1", first, source=source)


class _Opened:
    """A file of the dataset folder held open: its descriptor, and names the engines can open it by."""

    def __init__(self, folder: Path, rel: str) -> None:
        path = resolve_inside(folder, rel)
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            raise InvalidManifestError(f"{folder.name}: {rel!r} cannot be opened ({e.strerror})") from e
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise InvalidManifestError(f"{folder.name}: {rel!r} is not a regular file")
        proc = Path(f"/proc/self/fd/{self.fd}")
        self.name = str(proc) if proc.exists() else str(path)
        self.uri = f"file:{self.name}" if proc.exists() else path.as_uri()

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
