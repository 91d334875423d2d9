"""Writing one version of the local store: the SQLite database and the FAISS index, in a staging folder."""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.analysis.analyzers import analysis_language, index_terms
from mcpower.layout import fsync_path
from mcpower.store import ChunkRow, DocumentRow
from mcpower.store.local.fts import segment
from mcpower.store.local.keyword import write_postings
from mcpower.store.local.schema import CHUNKS, DOCUMENTS, FTS, insert_sql, schema, values
from mcpower.store.local.vectors import VECTORS_FILE, WRITE_ROWS, write_vector_file

if TYPE_CHECKING:
    from numpy.typing import NDArray

# Above this many chunks an exact scan costs more than ~8 ms a query here, so the vector side
# switches to HNSW.
HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
# Vectors the scalar quantiser learns each dimension's range from: a spread sample, not all of them
# (the range of 65k real chunk vectors is the range of a million, to a code step).
SQ_TRAIN_SAMPLE = 65_536
# Vectors added to the graph per call: the codes of one block are made from float32 rows, so the
# floats in memory at once are one block, whatever the dataset's size.
ADD_BLOCK = 16_384


def write_metadata(
    path: Path,
    documents: Iterable[DocumentRow],
    chunks: Iterable[ChunkRow],
    *,
    analysed: bool,
    undetermined: str | None = None,
) -> None:
    """Create the SQLite file at ``path`` with documents, chunks, the full-text index and its postings."""
    with closing(sqlite3.connect(path)) as db:
        db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
        fill_metadata(db, documents, chunks, analysed=analysed, undetermined=undetermined)
        db.commit()
    fsync_path(path)


def fill_metadata(
    db: sqlite3.Connection,
    documents: Iterable[DocumentRow],
    chunks: Iterable[ChunkRow],
    *,
    analysed: bool,
    undetermined: str | None = None,
) -> None:
    """Create the schema in the empty database ``db`` (a file, or one in memory) and fill it:
    documents, chunks, the full-text index and its postings. The caller commits.

    ``analysed``: the index holds each chunk's terms in its language (mcpower.analysis), chunks of
    undetermined language analysed as ``undetermined`` (the manifest's); else FTS5's Porter
    tokenizer makes them (a dataset of the original system's format, served as before).
    """
    db.executescript(schema(analysed))
    db.executemany(insert_sql(DOCUMENTS, DocumentRow), map(values, documents))
    db.executemany(insert_sql(CHUNKS, ChunkRow), map(values, chunks))
    rows = db.execute(
        "SELECT c.id, c.text, d.title, c.heading_path, c.language "
        f"FROM {CHUNKS} c JOIN {DOCUMENTS} d ON d.id = c.document_id ORDER BY c.id"
    )
    index = partial(_analysed, undetermined) if analysed else _segmented
    # The analysis runs here, between SQLite steps, not inside the statement as an SQL function:
    # Python's sqlite3 discards whatever a function raises ("user-defined function raised
    # exception"), so a Ctrl-C (KeyboardInterrupt) or SIGTERM (SystemExit) landing in it
    # would turn into a disk-write error instead of stopping the ingest.
    db.executemany(f"INSERT INTO {FTS}(rowid, text, title, heading_path) VALUES (?, ?, ?, ?)", map(index, rows))
    db.execute(f"INSERT INTO {FTS}({FTS}) VALUES ('optimize')")
    write_postings(db)


def _analysed(undetermined: str | None, row: tuple[int, str, str, str, str]) -> tuple[int, str, str, str]:
    i, text, title, heading, chunk_language = row
    language = analysis_language(chunk_language, undetermined)
    return (
        i,
        " ".join(index_terms(text, language)),
        " ".join(index_terms(title, language)),
        " ".join(index_terms(heading, language)),
    )


def _segmented(row: tuple[int, str, str, str, str]) -> tuple[int, str, str, str]:
    i, text, title, heading, _ = row
    return i, segment(text), segment(title), segment(heading)


def write_vectors(
    path: Path, ids: NDArray[np.int64], vectors: NDArray[np.float32], kind: str | None = None
) -> dict[str, Any]:
    """Write the FAISS index for ``vectors`` (unit rows) keyed by chunk ``ids``; returns its manifest info.

    An ``hnsw_sq`` index (the kind above HNSW_THRESHOLD) also writes the exact vectors beside it
    (:data:`~mcpower.store.local.vectors.VECTORS_FILE`, block by block) and names it in the info's
    ``vectors_file``.
    """
    import faiss

    index, info = vector_index(ids, vectors, kind=kind)
    faiss.write_index(index, str(path))
    fsync_path(path)
    if info["kind"] == "hnsw_sq":
        floats = path.with_name(VECTORS_FILE)
        write_vector_file(floats, (vectors[s : s + WRITE_ROWS] for s in range(0, len(vectors), WRITE_ROWS)))
        fsync_path(floats)
        info["vectors_file"] = VECTORS_FILE
    return info


def index_kind(n: int, exact: bool = False) -> str:
    """The vector index a version of ``n`` chunks gets: exact up to HNSW_THRESHOLD, then an HNSW graph
    over 8-bit codes with the exact vectors on disk (``hnsw_sq``)."""
    return "flat" if exact or n <= max(HNSW_THRESHOLD, 0) else "hnsw_sq"


def vector_index(
    ids: NDArray[np.int64], vectors: NDArray[np.float32], exact: bool = False, kind: str | None = None
) -> tuple[Any, dict[str, Any]]:
    """The FAISS index (in memory) for ``vectors`` keyed by chunk ``ids``, and its manifest info.

    ``kind``: ``flat``, ``hnsw`` (the graph over float vectors, as versions before ``hnsw_sq`` were
    built) or ``hnsw_sq``; by default :func:`index_kind`'s choice (``exact``: flat whatever the size).
    """
    import faiss

    dim = vectors.shape[1]
    kind = kind or index_kind(len(ids), exact)
    info: dict[str, Any]
    inner: Any
    if kind == "hnsw_sq":
        qt8: Any = faiss.ScalarQuantizer.QT_8bit  # an enum value the stubs type as int
        inner = faiss.IndexHNSWSQ(dim, qt8, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        inner.hnsw.efSearch = hnsw_ef_search(len(ids))
        inner.train(_sample(vectors, SQ_TRAIN_SAMPLE))
        info = {"kind": "hnsw_sq", "hnsw_m": HNSW_M, "ef_search": inner.hnsw.efSearch}
        index = faiss.IndexIDMap(inner)  # no reverse map: exact vectors are read from their file by row
    elif kind == "hnsw":
        inner = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        inner.hnsw.efSearch = hnsw_ef_search(len(ids))
        info = {"kind": "hnsw", "hnsw_m": HNSW_M, "ef_search": inner.hnsw.efSearch}
        index = faiss.IndexIDMap2(inner)
    else:
        inner = faiss.IndexFlatIP(dim)
        info = {"kind": "flat"}
        index = faiss.IndexIDMap2(inner)
    ids = np.asarray(ids, dtype=np.int64)
    for start in range(0, len(ids), ADD_BLOCK):  # one block of float32 copies at a time
        block = np.ascontiguousarray(vectors[start : start + ADD_BLOCK], dtype=np.float32)
        index.add_with_ids(block, ids[start : start + ADD_BLOCK])
    return index, info


def _sample(vectors: NDArray[np.float32], n: int) -> NDArray[np.float32]:
    """Up to ``n`` rows spread evenly over ``vectors`` (documents in order: a prefix would be one part)."""
    if len(vectors) <= n:
        return np.ascontiguousarray(vectors, dtype=np.float32)
    return np.ascontiguousarray(vectors[np.linspace(0, len(vectors) - 1, n).astype(np.int64)], dtype=np.float32)


def hnsw_ef_search(n: int) -> int:
    """The HNSW search breadth for ``n`` vectors: recall@10 against exact search stays near 0.99.

    A bigger graph needs a wider search for the same recall. Measured (benchmarks/, real-like
    MiniLM vectors): 100k vectors 0.9973 at 128; 1M vectors 0.948 at 128, 0.984 at 512, 0.989 at
    768 (2.9 ms), 0.994 at 1024. So 128 at 100k, growing as n^0.8 (832 at 1M), in steps of 32,
    up to the manifest's limit of 4096 (reached near 8M vectors).
    """
    return min(max(128, math.ceil(128 * math.pow(n / 100_000, 0.8) / 32) * 32), 4096)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
