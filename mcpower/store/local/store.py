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
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.checksums import FileHashes
from mcpower.errors import IndexMismatchError, InvalidManifestError
from mcpower.layout import resolve_inside
from mcpower.manifest import DatasetInfo, Manifest
from mcpower.results import SearchFilters, normalize_rel
from mcpower.store import ChunkHit, ChunkRow, DocumentRow, DocumentSummary
from mcpower.store.faiss_file import check_index_file
from mcpower.store.local.fts import query_phrases
from mcpower.store.local.keyword import COLUMN_WEIGHTS, KeywordHits, chunk_ids, combine, read_postings
from mcpower.store.local.pool import ConnectionPool
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

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

# With a filter this selective, HNSW's graph walk may miss; score the few allowed vectors exactly.
EXACT_FILTER_MAX = 8192
# Filters whose allowed chunks are remembered (a search asks for both candidate lists, and
# clients repeat filters); each entry is one int64 per allowed chunk.
FILTER_CACHE_SIZE = 16


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
    ) -> None:
        self.manifest = manifest  # a Manifest, or the DatasetInfo of a store built in memory (store/original/)
        self.folder = folder
        self._index = index
        # A lone connection serves its readers in turn; a pool opens one per concurrent reader.
        self._db = db if isinstance(db, ConnectionPool) else ConnectionPool(None, db)
        self._ids = ids  # every chunk id, ascending: the rows of the keyword postings
        self._postings = postings  # False for a database written before postings existed: FTS5 scores all
        # Chunk columns a database written before them lacks (pages, language): read as their defaults.
        self._missing = missing
        self._hit_sql = hit_sql(missing)
        self._hnsw = hnsw  # an approximate index: a selective filter is scored exactly instead
        self._lock = threading.Lock()  # guards the filter cache
        self._allowed_cache: dict[SearchFilters, NDArray[np.int64]] = {}

    @property
    def info(self) -> DatasetInfo:
        return self.manifest

    @property
    def id(self) -> str:
        return self.manifest.id

    def close(self) -> None:
        self._db.close()

    # -- search

    def semantic(
        self, vector: NDArray[np.float32], k: int, where: SearchFilters | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, cosine) pairs, best first, among the chunks ``where`` allows."""
        import faiss

        if self._index.ntotal == 0:
            return []
        q = np.ascontiguousarray(vector.reshape(1, -1), dtype=np.float32)
        params: Any = None
        allowed = self._allowed(where)
        if allowed is not None:
            if not len(allowed):
                return []
            if len(allowed) <= EXACT_FILTER_MAX and self._hnsw:
                vecs = np.vstack([self._index.reconstruct(int(i)) for i in allowed])
                sims = vecs @ q[0]
                order = np.argsort(-sims)[:k]
                return self._clean(allowed[order].tolist(), sims[order])
            selector = faiss.IDSelectorBatch(allowed)
            params = faiss.SearchParameters()
            params.sel = selector  # SWIG keeps no reference: `selector` must outlive the search
        k = min(k, self._index.ntotal)
        with _one_omp_thread(faiss):
            scores, ids = self._index.search(q, k, params=params)
        return self._clean(ids[0].tolist(), scores[0])

    def _clean(self, ids: Sequence[int], scores: NDArray[np.float32]) -> list[tuple[int, float]]:
        # FAISS pads with -1 and a damaged index could return anything: keep finite scores only.
        return [(int(i), float(s)) for i, s in zip(ids, scores) if i >= 0 and np.isfinite(s)]

    def keyword(self, query: str, where: SearchFilters | None = None) -> KeywordHits:
        """Every chunk ``where`` allows that holds a term of ``query``, with its BM25 (as FTS5 scores it).

        Raises:
            IndexMismatchError: the postings do not fit the chunk table.
        """
        phrases = query_phrases(query)
        single = [p.tokens[0] for p in phrases if self._postings and len(p.tokens) == 1]
        by_fts = [p.fts for p in phrases if not (self._postings and len(p.tokens) == 1)]
        allowed = self._allowed(where)
        with self._db.connection() as db:
            postings = read_postings(db, single)
            fts_scores = (
                db.execute(
                    f"SELECT rowid, -bm25({FTS}, ?, ?, ?) FROM {FTS} WHERE {FTS} MATCH ?",
                    (*COLUMN_WEIGHTS, " OR ".join(by_fts)),
                ).fetchall()
                if by_fts
                else []
            )
        mask = None
        if allowed is not None:
            mask = np.zeros(len(self._ids), dtype=bool)
            mask[np.searchsorted(self._ids, allowed)] = True
        try:
            return combine(self._ids, postings, fts_scores, mask)
        except ValueError as e:
            source = self.manifest.metadata if isinstance(self.manifest, Manifest) else "keyword index"
            raise IndexMismatchError(f"{self.id}: {source}: {e}; re-run `mcpower ingest`") from e

    def _allowed(self, where: SearchFilters | None) -> NDArray[np.int64] | None:
        """Ids of the chunks whose document passes ``where`` (None: no filter, all pass)."""
        if where is None or not where.active:
            return None
        with self._lock:
            cached = self._allowed_cache.get(where)
        if cached is None:
            sql, args = _filter_sql(where)
            with self._db.connection() as db:
                rows = db.execute(f"SELECT c.id FROM {CHUNKS} c JOIN {DOCUMENTS} d ON d.id = c.document_id {sql}", args)
                cached = np.fromiter((i for (i,) in rows), dtype=np.int64)
            with self._lock:
                if len(self._allowed_cache) >= FILTER_CACHE_SIZE:
                    self._allowed_cache.pop(next(iter(self._allowed_cache)))  # the oldest
                self._allowed_cache[where] = cached
        return cached

    # -- lookups

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkHit]:
        """The chunks with these ids (unknown ids are simply absent)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._db.connection() as db:
            rows = db.execute(f"{self._hit_sql} WHERE c.id IN ({marks})", list(ids)).fetchall()
        return {hit.id: hit for hit in (ChunkHit(*r) for r in rows)}

    def neighbors(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        """The chunks of ``hit``'s document from ``before`` ahead of it to ``after`` behind it, in order."""
        with self._db.connection() as db:
            rows = db.execute(
                f"{self._hit_sql} WHERE c.document_id = ? AND c.ordinal BETWEEN ? AND ? ORDER BY c.ordinal",
                (hit.document_id, hit.ordinal - before, hit.ordinal + after),
            ).fetchall()
        return [ChunkHit(*r) for r in rows]

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
        return np.vstack([self._index.reconstruct(int(i)) for i in ids]).astype(np.float32)


@contextmanager
def _one_omp_thread(faiss: Any) -> Iterator[None]:
    """Run this thread's FAISS calls on one OpenMP thread, then restore its setting.

    One query is searched on one thread anyway (flat search splits the work by query, HNSW too);
    the only parallel region left is IndexIDMap's relabelling of the k results, and waking a second
    thread for it cost ~30 ms p50 on a busy 2-CPU machine against 0.8 ms without (benchmarks/run.py).
    OpenMP's thread count belongs to the calling thread, so index builds elsewhere keep theirs.
    """
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


def _filter_sql(filters: SearchFilters) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    if filters.path:
        clauses.append("d.path = ?")
        args.append(normalize_rel(filters.path))
    if filters.folder and normalize_rel(filters.folder):
        folder = normalize_rel(filters.folder) + "/"
        clauses.append("substr(d.path, 1, ?) = ?")
        args += [len(folder), folder]
    if filters.file_type:
        ft = filters.file_type.lower()
        clauses.append("d.file_type = ?")
        args.append(ft if ft.startswith(".") else "." + ft)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


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
        if manifest.vector_index.kind == "hnsw" and manifest.vector_index.ef_search:
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
        pool = _reader_pool(meta_fd, db)
    if not (index.ntotal == n_chunks == manifest.counts.chunks == len(ids)) or n_docs != manifest.counts.documents:
        pool.close()
        raise IndexMismatchError(
            f"{name}: counts disagree (index {index.ntotal} vectors, database {n_chunks} chunks / "
            f"{n_docs} documents, manifest {manifest.counts.chunks} / {manifest.counts.documents})"
        )
    return LocalStore(manifest, folder, index, pool, ids, postings, missing, hnsw=manifest.vector_index.kind == "hnsw")


def _ascending_ids(index: Any, db: sqlite3.Connection) -> NDArray[np.int64]:
    """Every chunk id, ascending: from the index's id map (in memory already); reading them from
    the chunks table means reading every chunk's text (0.77 s at 100k chunks from a cold cache)."""
    import faiss

    id_map = getattr(index, "id_map", None)
    if id_map is not None:
        return np.sort(faiss.vector_to_array(id_map).astype(np.int64, copy=False))
    return chunk_ids(db)


def _reader_pool(opened: _Opened, first: sqlite3.Connection) -> ConnectionPool:
    """Connections to the verified database for concurrent readers: opened through a descriptor of
    its own (``/proc/self/fd``) where there is one, so they read the very file that was checked."""
    if opened.name.startswith("/proc/self/fd/"):
        fd = os.dup(opened.fd)
        return ConnectionPool(f"file:/proc/self/fd/{fd}?mode=ro&immutable=1", first, keep_fd=fd)
    return ConnectionPool(f"{opened.uri}?mode=ro&immutable=1", first)


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
