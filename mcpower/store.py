"""KnowledgeStore: one published dataset version on disk — FAISS vectors plus a SQLite database.

The SQLite file holds documents, chunks, an FTS5 index over chunk text, title and heading path,
and per-term BM25 postings derived from it (mcpower/keyword.py).
FAISS ids are chunk ids, so a vector hit leads to its chunk and a chunk to its vector. Files are
verified against the manifest's sha256 before they are used; a published version is never
modified, so a loaded store stays consistent while newer versions are published beside it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.errors import IndexMismatchError, InvalidManifestError
from mcpower.fts import FTS_TOKENIZER, query_phrases, segment
from mcpower.keyword import COLUMN_WEIGHTS, KeywordHits, chunk_ids, combine, has_postings, read_postings, write_postings
from mcpower.manifest import Manifest, fsync_path
from mcpower.results import SearchFilters

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"
METADATA_FILE = "meta.sqlite"
# Above this many chunks an exact scan costs more than ~8 ms a query here, so the vector side
# switches to HNSW.
HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
# With a filter this selective, HNSW's graph walk may miss; score the few allowed vectors exactly.
EXACT_FILTER_MAX = 8192

SCHEMA = f"""
CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    file_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime REAL NOT NULL,
    content_hash TEXT NOT NULL,
    indexed_at TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id),
    ordinal INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (document_id, ordinal)
);
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, title, heading_path, content='', tokenize='{FTS_TOKENIZER}'
);
"""


@dataclass(frozen=True)
class DocumentRow:
    id: int
    path: str
    title: str
    file_type: str
    size: int
    mtime: float
    content_hash: str
    indexed_at: str
    content: str


@dataclass(frozen=True)
class ChunkRow:
    id: int
    document_id: int
    ordinal: int
    heading_path: str
    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True)
class ChunkHit:
    """A chunk with its document's fields, as search and get_source need them."""

    id: int
    ordinal: int
    heading_path: str
    start_line: int
    end_line: int
    text: str
    path: str
    title: str
    file_type: str
    document_id: int


def chunk_id(path: str, text: str, occurrence: int) -> int:
    """Stable id of a chunk: the same text at the same path gets the same id on every ingest."""
    digest = hashlib.blake2b(f"{path}\0{occurrence}\0{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF  # FAISS ids are signed int64


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- writing (ingest)


def write_metadata(path: Path, documents: Iterable[DocumentRow], chunks: Iterable[ChunkRow]) -> None:
    """Create the SQLite file at ``path`` with documents, chunks, the full-text index and its postings."""
    with closing(sqlite3.connect(path)) as db:
        db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + SCHEMA)
        db.executemany("INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?)", map(_astuple, documents))
        db.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?,?)", map(_astuple, chunks))
        db.create_function("segment", 1, segment, deterministic=True)
        db.execute(
            "INSERT INTO chunks_fts(rowid, text, title, heading_path) "
            "SELECT c.id, segment(c.text), segment(d.title), segment(c.heading_path) "
            "FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id"
        )
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        write_postings(db)
        db.commit()
    fsync_path(path)


def write_vectors(path: Path, ids: NDArray[np.int64], vectors: NDArray[np.float32]) -> dict[str, Any]:
    """Write the FAISS index for ``vectors`` (unit rows) keyed by chunk ``ids``; returns its manifest info."""
    import faiss

    dim = vectors.shape[1]
    info: dict[str, Any]
    inner: Any
    if len(ids) > HNSW_THRESHOLD:
        inner = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        inner.hnsw.efSearch = hnsw_ef_search(len(ids))
        info = {"kind": "hnsw", "hnsw_m": HNSW_M, "ef_search": inner.hnsw.efSearch}
    else:
        inner = faiss.IndexFlatIP(dim)
        info = {"kind": "flat"}
    index = faiss.IndexIDMap2(inner)
    if len(ids):
        index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
    faiss.write_index(index, str(path))
    fsync_path(path)
    return info


def hnsw_ef_search(n: int) -> int:
    """The HNSW search breadth for ``n`` vectors: recall@10 against exact search stays near 0.99.

    A bigger graph needs a wider search for the same recall. Measured (benchmarks/, real-like
    MiniLM vectors): 100k vectors 0.9973 at 128; 1M vectors 0.948 at 128, 0.984 at 512, 0.989 at
    768 (2.9 ms), 0.994 at 1024. So 128 at 100k, growing as n^0.8 (832 at 1M), in steps of 32,
    up to the manifest's limit of 4096 (reached near 8M vectors).
    """
    return min(max(128, math.ceil(128 * math.pow(n / 100_000, 0.8) / 32) * 32), 4096)


def _astuple(row: DocumentRow | ChunkRow) -> tuple[Any, ...]:
    return tuple(row.__dict__.values())


# ---------------------------------------------------------------- reading (search)


def resolve_inside(folder: Path, rel: str) -> Path:
    """``folder/rel`` as a regular file that, symlinks resolved, stays inside ``folder``.

    Raises:
        InvalidManifestError: the path escapes the folder or is not a regular file.
    """
    root = folder.resolve()
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise InvalidManifestError(f"{folder.name}: {rel!r} points outside the dataset folder")
    try:
        mode = os.stat(target).st_mode
    except OSError as e:
        raise InvalidManifestError(f"{folder.name}: {rel!r} is missing ({e.strerror})") from e
    if not stat.S_ISREG(mode):
        raise InvalidManifestError(f"{folder.name}: {rel!r} is not a regular file")
    return target


class KnowledgeStore:
    """A loaded, verified dataset version: vector search, keyword search and lookups by chunk id.

    Thread-safe: FAISS searches run in parallel; SQLite access is serialised by a lock.
    """

    def __init__(
        self,
        manifest: Manifest,
        folder: Path,
        index: Any,
        db: sqlite3.Connection,
        ids: NDArray[np.int64],
        postings: bool,
    ) -> None:
        self.manifest = manifest
        self.folder = folder
        self._index = index
        self._db = db
        self._ids = ids  # every chunk id, ascending: the rows of the keyword postings
        self._postings = postings  # False for a database written before postings existed: FTS5 scores all
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.manifest.id

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- search

    def semantic(
        self, query_vector: NDArray[np.float32], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, cosine) pairs, best first, among the ``allowed`` chunk ids (None: all)."""
        import faiss

        if self._index.ntotal == 0:
            return []
        q = np.ascontiguousarray(query_vector.reshape(1, -1), dtype=np.float32)
        params: Any = None
        if allowed is not None:
            if not allowed:
                return []
            if len(allowed) <= EXACT_FILTER_MAX and self.manifest.vector_index.kind == "hnsw":
                vecs = np.vstack([self._index.reconstruct(i) for i in allowed])
                sims = vecs @ q[0]
                order = np.argsort(-sims)[:k]
                return self._clean([allowed[i] for i in order], sims[order])
            selector = faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
            params = faiss.SearchParameters()
            params.sel = selector  # SWIG keeps no reference: `selector` must outlive the search
        k = min(k, self._index.ntotal)
        with _one_omp_thread(faiss):
            scores, ids = self._index.search(q, k, params=params)
        return self._clean(ids[0].tolist(), scores[0])

    def _clean(self, ids: Sequence[int], scores: NDArray[np.float32]) -> list[tuple[int, float]]:
        # FAISS pads with -1 and a damaged index could return anything: keep finite scores only.
        return [(int(i), float(s)) for i, s in zip(ids, scores) if i >= 0 and np.isfinite(s)]

    def keyword(self, query: str, allowed: Sequence[int] | None = None) -> KeywordHits:
        """Every chunk that holds a term of ``query``, with its BM25 (as FTS5 scores it).

        Only the ``allowed`` chunk ids are kept, if given.

        Raises:
            IndexMismatchError: the postings do not fit the chunk table.
        """
        phrases = query_phrases(query)
        single = [p.tokens[0] for p in phrases if self._postings and len(p.tokens) == 1]
        by_fts = [p.fts for p in phrases if not (self._postings and len(p.tokens) == 1)]
        with self._lock:
            postings = read_postings(self._db, single)
            fts_scores = (
                self._db.execute(
                    "SELECT rowid, -bm25(chunks_fts, ?, ?, ?) FROM chunks_fts WHERE chunks_fts MATCH ?",
                    (*COLUMN_WEIGHTS, " OR ".join(by_fts)),
                ).fetchall()
                if by_fts
                else []
            )
        mask = None
        if allowed is not None:
            mask = np.zeros(len(self._ids), dtype=bool)
            mask[np.searchsorted(self._ids, np.array(allowed, dtype=np.int64))] = True
        try:
            return combine(self._ids, postings, fts_scores, mask)
        except ValueError as e:
            raise IndexMismatchError(f"{self.id}: {self.manifest.metadata}: {e}; re-run `mcpower ingest`") from e

    def filtered_ids(self, filters: SearchFilters) -> list[int]:
        """Ids of the chunks whose document passes ``filters``."""
        where, args = _filter_sql(filters)
        with self._lock:
            rows = self._db.execute(
                f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id {where}", args
            ).fetchall()
        return [r[0] for r in rows]

    # -- lookups

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkHit]:
        """The chunks with these ids (unknown ids are simply absent)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(f"{_HIT_SQL} WHERE c.id IN ({marks})", list(ids)).fetchall()
        return {r[0]: ChunkHit(*r) for r in rows}

    def neighbours(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        """The chunks of the same document from ``before`` ahead of ``hit`` to ``after`` behind it."""
        with self._lock:
            rows = self._db.execute(
                f"{_HIT_SQL} WHERE c.document_id = ? AND c.ordinal BETWEEN ? AND ? ORDER BY c.ordinal",
                (hit.document_id, hit.ordinal - before, hit.ordinal + after),
            ).fetchall()
        return [ChunkHit(*r) for r in rows]

    def chunk_count(self, document_id: int) -> int:
        with self._lock:
            return int(
                self._db.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (document_id,)).fetchone()[0]
            )

    def document(self, path: str) -> DocumentRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM documents WHERE path = ?", (path,)).fetchone()
        return DocumentRow(*row) if row else None

    def document_by_id(self, document_id: int) -> DocumentRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM documents WHERE id = ?", (document_id,)).fetchone()
        return DocumentRow(*row) if row else None

    def documents(self) -> list[tuple[str, str, str, int]]:
        """(path, title, file_type, size) of every document, by path."""
        with self._lock:
            return self._db.execute("SELECT path, title, file_type, size FROM documents ORDER BY path").fetchall()

    def iter_document_rows(self) -> Iterator[tuple[DocumentRow, list[ChunkRow]]]:
        """Every document with its chunks (for incremental re-ingest)."""
        with self._lock:
            docs = [DocumentRow(*r) for r in self._db.execute("SELECT * FROM documents")]
            chunk_rows = [ChunkRow(*r) for r in self._db.execute("SELECT * FROM chunks ORDER BY document_id, ordinal")]
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


_HIT_SQL = """SELECT c.id, c.ordinal, c.heading_path, c.start_line, c.end_line, c.text,
       d.path, d.title, d.file_type, d.id
FROM chunks c JOIN documents d ON d.id = c.document_id"""


def _filter_sql(filters: SearchFilters | None) -> tuple[str, list[Any]]:
    if filters is None:
        return "", []
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


def normalize_rel(path: str) -> str:
    """A user-typed relative path in the form documents are stored: 'a/b.md' (no ./, no slashes around)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def _check_schema(db: sqlite3.Connection) -> None:
    """Raise sqlite3.Error unless every table and column that search reads is there.

    A file another version or tool wrote (its checksum recorded by hand) must fail here, at load,
    not in the middle of a search of every dataset.
    """
    db.execute(f"{_HIT_SQL} LIMIT 0").fetchall()
    db.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH 'probe' LIMIT 0").fetchall()
    if has_postings(db):
        read_postings(db, ["probe"])
    for table, row in (("documents", DocumentRow), ("chunks", ChunkRow)):
        cursor = db.execute(f"SELECT * FROM {table} LIMIT 0")  # rows are unpacked into these dataclasses
        if len(cursor.description) != len(fields(row)):
            raise sqlite3.DatabaseError(f"table {table} has {len(cursor.description)} columns, not {len(fields(row))}")


def open_store(folder: Path, manifest: Manifest, verify: bool = True) -> KnowledgeStore:
    """Load the dataset version ``manifest`` points at, after checking it against the manifest.

    Raises:
        InvalidManifestError: a path escapes the folder or is not a regular file.
        IndexMismatchError: checksum, count or dimension disagree with the manifest, or a file is corrupt.
    """
    import faiss

    name = manifest.id
    index_path = resolve_inside(folder, manifest.index)
    meta_path = resolve_inside(folder, manifest.metadata)
    # Streamed, then read by FAISS from the file: holding the bytes to hash and deserialise them
    # cost three copies of the index in memory (5.4 GB at 1M chunks) and 4 s of copying.
    if verify and sha256_file(index_path) != manifest.checksums.index:
        raise IndexMismatchError(f"{name}: {manifest.index} does not match its checksum; re-run `mcpower ingest`")
    if verify and sha256_file(meta_path) != manifest.checksums.metadata:
        raise IndexMismatchError(f"{name}: {manifest.metadata} does not match its checksum; re-run `mcpower ingest`")
    index: Any
    try:
        index = faiss.read_index(str(index_path))
    except Exception as e:  # faiss raises RuntimeError with C++ text for any corruption
        raise IndexMismatchError(f"{name}: {manifest.index} is not a readable FAISS index") from e
    if index.d != manifest.embedding.dimension:
        raise IndexMismatchError(f"{name}: index dimension {index.d} != model dimension {manifest.embedding.dimension}")
    if manifest.vector_index.kind == "hnsw" and manifest.vector_index.ef_search:
        hnsw: Any = faiss.downcast_index(index.index)
        hnsw.hnsw.efSearch = manifest.vector_index.ef_search
    db: sqlite3.Connection | None = None
    try:
        # immutable=1: published versions never change, so SQLite may skip locking entirely.
        db = sqlite3.connect(f"{meta_path.as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        _check_schema(db)
        n_chunks, n_docs = db.execute(
            "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM documents)"
        ).fetchone()
        ids = chunk_ids(db)
        postings = has_postings(db)
    except sqlite3.Error as e:
        if db is not None:
            db.close()
        raise IndexMismatchError(f"{name}: {manifest.metadata} is not a readable SQLite database ({e})") from e
    if not (index.ntotal == n_chunks == manifest.counts.chunks) or n_docs != manifest.counts.documents:
        db.close()
        raise IndexMismatchError(
            f"{name}: counts disagree (index {index.ntotal} vectors, database {n_chunks} chunks / "
            f"{n_docs} documents, manifest {manifest.counts.chunks} / {manifest.counts.documents})"
        )
    return KnowledgeStore(manifest, folder, index, db, ids, postings)
