"""Keyword side of search: BM25 from per-term postings, scored exactly as FTS5's bm25() would.

FTS5 scores an OR query by visiting every row that matches any term, which at 100k chunks costs
~85 ms a query. So ingest turns the FTS5 index's own terms (read through fts5vocab, so query and
index agree on every stem) into postings: for each term, the rows of the chunks holding it and
each chunk's BM25 contribution for that term. A query then adds up its terms' postings with numpy.

This is exact, not an approximation: BM25 of an OR query is the sum over its phrases of
idf(phrase) · tf-part(phrase, chunk), each phrase's part independent of the others. Single-token
phrases come from the postings; multi-token phrases (runs of CJK characters, which need
adjacency) come from FTS5 itself. Either way the total equals ``-bm25(chunks_fts, weights)``
to float precision (tests/test_keyword.py). A database written before postings existed is scored
by FTS5 alone.

Rows index the chunk ids in ascending order (``SELECT id FROM chunks ORDER BY id``).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from mcpower.store.local.schema import CHUNKS, FTS, FTS_DOCSIZE, POSTINGS, POSTINGS_SCHEMA

if TYPE_CHECKING:
    from numpy.typing import NDArray

# FTS5's bm25() constants (sqlite/ext/fts5/fts5_aux.c); changing them would break the equality above.
K1 = 1.2
B = 0.75
# FTS5 clamps a non-positive idf (a term in more than half the rows) to this.
MIN_IDF = 1e-6
# Column weights for (text, title, heading_path): a title or heading hit says more than a body hit.
COLUMN_WEIGHTS = (1.0, 2.0, 1.5)
_ROW = np.dtype("<i4")
# (term, chunk) rows read at a time when postings are written: ~100 MB of Python tuples at most.
POSTINGS_BLOCK = 500_000
_IMPACT = np.dtype("<f4")


def write_postings(db: sqlite3.Connection) -> None:
    """Fill the postings table from the FTS5 table of ``db`` (ingest, after the FTS5 rows)."""
    db.executescript(POSTINGS_SCHEMA)
    db.execute(f"CREATE VIRTUAL TABLE temp.chunks_vocab USING fts5vocab(main, {FTS}, 'instance')")
    try:
        ids = chunk_ids(db)
        n = len(ids)
        if n == 0:
            return
        lengths = row_sizes(db, ids)
        norm = K1 * (1 - B + B * lengths / (lengths.sum() / n))
        weight = "CASE col WHEN 'text' THEN ? WHEN 'title' THEN ? ELSE ? END"
        # One row per (term, chunk) holding it, with the term's weighted frequency there, in term
        # order; read a block at a time and turned into postings a block of whole terms at a time
        # (every impact of a block at once with numpy: a loop over terms cost ~1 ms a term). Memory
        # is a block, whatever the dataset's size: a million chunks are ~10^8 such rows, which as
        # Python tuples all at once took over 20 GB.
        # Closed on the way out, before the DROP below: an exception (Ctrl-C, SIGTERM) while fetching
        # leaves this SELECT open on chunks_vocab, and SQLite refuses to drop a virtual table that
        # a statement still reads ("database table is locked"), an error that would replace it.
        with closing(
            db.execute(
                f"SELECT term, doc, sum({weight}) FROM temp.chunks_vocab GROUP BY term, doc ORDER BY term, doc",
                COLUMN_WEIGHTS,
            )
        ) as cursor:
            pending: list[tuple[str, int, float]] = []
            while block := cursor.fetchmany(POSTINGS_BLOCK):
                pending.extend(block)
                # The last term of the block may go on in the next one: keep it back.
                last, cut = pending[-1][0], len(pending) - 1
                while cut > 0 and pending[cut - 1][0] == last:
                    cut -= 1
                if cut:
                    _insert_postings(db, pending[:cut], ids, norm)
                    del pending[:cut]
            if pending:
                _insert_postings(db, pending, ids, norm)
    finally:
        db.execute("DROP TABLE temp.chunks_vocab")


def _insert_postings(
    db: sqlite3.Connection,
    pairs: Sequence[tuple[str, int, float]],
    ids: NDArray[np.int64],
    norm: NDArray[np.float64],
) -> None:
    """Postings rows for ``pairs`` (term, chunk id, weighted frequency), whole terms in term order."""
    n = len(ids)
    terms, docs, tfs = zip(*pairs, strict=True)
    starts = [0, *(i for i in range(1, len(terms)) if terms[i] != terms[i - 1]), len(terms)]
    counts = np.diff(starts)
    rows = np.searchsorted(ids, np.array(docs, dtype=np.int64))
    tf = np.array(tfs, dtype=np.float64)
    idf = [max(math.log((n - c + 0.5) / (c + 0.5)), MIN_IDF) for c in counts.tolist()]
    impacts = np.repeat(np.array(idf, dtype=np.float64), counts) * tf * (K1 + 1) / (tf + norm[rows])
    row_bytes, impact_bytes = rows.astype(_ROW), impacts.astype(_IMPACT)
    db.executemany(
        f"INSERT INTO {POSTINGS} VALUES (?, ?, ?)",
        ((terms[a], row_bytes[a:b].tobytes(), impact_bytes[a:b].tobytes()) for a, b in pairwise(starts)),
    )


def row_sizes(db: sqlite3.Connection, ids: NDArray[np.int64]) -> NDArray[np.float64]:
    """Tokens in all columns of each chunk's FTS5 row, as bm25() counts a row's size; rows as ``ids``.

    Read from FTS5's own docsize table (one varint per column, SQLite's varint
    format), 40x faster than counting fts5vocab instances; the count is the fallback should that
    table ever be missing or read differently.
    """
    sizes = np.zeros(len(ids), dtype=np.float64)
    try:
        rows = db.execute(f"SELECT id, sz FROM {FTS_DOCSIZE}").fetchall()
    except sqlite3.Error:
        rows = []
    columns = [_varints(sz) for _, sz in rows]
    if len(rows) == len(ids) and all(len(c) == len(COLUMN_WEIGHTS) for c in columns):
        sizes[np.searchsorted(ids, [i for i, _ in rows])] = [sum(c) for c in columns]
        return sizes
    for doc, size in db.execute("SELECT doc, count(*) FROM temp.chunks_vocab GROUP BY doc"):
        sizes[np.searchsorted(ids, doc)] = size
    return sizes


def _varints(data: bytes) -> list[int]:
    """The integers in ``data``: big-endian groups of 7 bits, high bit set on all but a number's last byte."""
    out: list[int] = []
    value = 0
    for byte in data:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            out.append(value)
            value = 0
    return out


def chunk_ids(db: sqlite3.Connection) -> NDArray[np.int64]:
    """Every chunk id, ascending: position i in this array is row i of the postings."""
    return np.fromiter((i for (i,) in db.execute(f"SELECT id FROM {CHUNKS} ORDER BY id")), dtype=np.int64)


def read_postings(db: sqlite3.Connection, terms: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """The (chunk rows, impacts) blobs of those ``terms`` the index holds."""
    sql = f"SELECT chunk_rows, impacts FROM {POSTINGS} WHERE term = ?"
    return [row for t in terms if (row := db.execute(sql, (t,)).fetchone())]


def read_postings_by_term(db: sqlite3.Connection, terms: Sequence[str]) -> dict[str, tuple[bytes, bytes]]:
    """The (chunk rows, impacts) blobs of those ``terms`` the index holds, by term."""
    sql = f"SELECT chunk_rows, impacts FROM {POSTINGS} WHERE term = ?"
    return {t: row for t in terms if (row := db.execute(sql, (t,)).fetchone())}


@dataclass(frozen=True)
class KeywordHits:
    """Every chunk a keyword query matched, with its BM25 score (> 0); ids ascending."""

    ids: NDArray[np.int64]
    scores: NDArray[np.float64]

    @classmethod
    def none(cls) -> KeywordHits:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.ids)

    def top(self, k: int) -> list[tuple[int, float]]:
        """The best ``k`` (chunk id, BM25) pairs, best first; equal scores by ascending id."""
        if k < len(self.scores):
            kth = np.partition(self.scores, len(self.scores) - k)[len(self.scores) - k]
            keep = np.flatnonzero(self.scores >= kth)  # ties at the cut stay in, to be ordered by id
        else:
            keep = np.arange(len(self.scores))
        order = keep[np.lexsort((self.ids[keep], -self.scores[keep]))][:k]
        return list(zip(self.ids[order].tolist(), self.scores[order].tolist()))

    def scores_of(self, ids: Iterable[int]) -> dict[int, float]:
        """BM25 of those of ``ids`` that matched."""
        wanted = np.fromiter(ids, dtype=np.int64)
        at = np.searchsorted(self.ids, wanted)
        found = at < len(self.ids)
        found[found] = self.ids[at[found]] == wanted[found]
        return dict(zip(wanted[found].tolist(), self.scores[at[found]].tolist()))


def combine(
    ids: NDArray[np.int64],
    postings: Sequence[tuple[bytes, bytes]],
    fts_scores: Sequence[tuple[int, float]],
    allowed: NDArray[np.bool_] | None,
) -> KeywordHits:
    """Add up the postings and the FTS5-scored rows into one KeywordHits, keeping ``allowed`` rows only.

    Raises:
        ValueError: a posting names a row past the end of ``ids`` (a database not written by ingest).
    """
    n = len(ids)
    rows = [np.frombuffer(r, dtype=_ROW) for r, _ in postings]
    weights = [np.frombuffer(w, dtype=_IMPACT) for _, w in postings]
    if fts_scores:
        fts_ids = np.array([i for i, _ in fts_scores], dtype=np.int64)
        rows.append(np.searchsorted(ids, fts_ids).astype(_ROW))
        weights.append(np.array([max(s, 0.0) for _, s in fts_scores], dtype=np.float64))
    if not rows:
        return KeywordHits.none()
    all_rows = np.concatenate(rows, dtype=np.intp)  # bincount's own type: it would copy int32 rows again
    if all_rows.size and (all_rows.min() < 0 or all_rows.max() >= n):
        raise ValueError("keyword postings point past the chunk table")
    # Converted to float64 in the one copy concatenation makes: bincount would convert float32
    # weights itself, at twice the cost.
    all_weights = np.concatenate(weights, dtype=np.float64)
    scores = np.bincount(all_rows, weights=all_weights, minlength=n).astype(np.float64, copy=False)
    if allowed is not None:
        scores[~allowed] = 0.0
    matched = np.flatnonzero(scores > 0)
    return KeywordHits(ids[matched], scores[matched])
