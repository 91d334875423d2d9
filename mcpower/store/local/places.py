"""Where every chunk is, held in memory column by column: what ranking and grouping read.

A search ranks ~50 candidates a side and reads each one's place (document, section, position,
lines, pages, language) and the fields the priors read (path, title), against ~5 for an ungrouped
one. Read from SQLite, each such row is a page of its own joined to its document's: 50 of them took
~3 ms at a million chunks, twice in a hybrid search (the keyword side's candidates, then the vector
side's), and they were most of what grouping cost on small datasets (issue 30). So a store that is
asked again (a server's) reads every chunk's place, without its text, once: after its first few
searches, on a thread of its own (a one-off search never pays for it), into numpy columns (~45
bytes a chunk, and each distinct heading once) beside its documents' fields. Then
``LocalStore.chunks(ids, text=False)`` is answered from memory; only the results' text is read
from SQLite. A small dataset also keeps every chunk's hit made (about 1 KB each), the cheapest
answer of all; a dataset over MAX_PLACES_CHUNKS reads the rows it is asked for each time, so
memory stays bounded.

The table is exactly what the SQL join reads, or none: a value the columns cannot hold as it is
(a database ingest did not write) leaves the store reading from SQLite, as before.

The table belongs to one LocalStore, that is to one published version of a dataset: a republished
dataset (an ingest, ``--watch``) is opened as a new store, with a new table; nothing is shared
between versions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.store import ChunkHit
from mcpower.store.local.schema import CHUNKS, DOCUMENTS, OPTIONAL_COLUMNS

if TYPE_CHECKING:
    import sqlite3

    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

# Datasets up to this many chunks keep their places in memory: ~45 bytes a chunk in columns, ~500
# a document, and each distinct heading once. The synthetic million (four chunks a document, each
# its own heading) took 233 MB more and 8 s of CPU to read them, in the background; twice that is
# the most held.
MAX_PLACES_CHUNKS = 2_000_000
# Up to this many chunks, every chunk's hit is made once and kept (about 1 KB each): answering
# from them is cheaper again than making ~50 hits a search from the columns (~0.1 ms).
MAX_HITS_CHUNKS = 10_000
# The table is read once a store has been asked this many times (a few searches): a one-off search
# (`mcpower search`, a cold start) never pays for it; a server reads it on its own thread meanwhile.
LOAD_AFTER = 6
# Rows fetched from SQLite at a time while reading the table (bounds what is held twice meanwhile).
BATCH_ROWS = 65_536


class Places:
    """Every chunk's place of one store version, answered from memory once read; None while not
    read (yet), too big to hold, or not readable as columns."""

    def __init__(
        self,
        chunks: int,
        connection: Callable[[], AbstractContextManager[sqlite3.Connection]],
        missing: frozenset[str],
    ) -> None:
        self._enabled = chunks <= MAX_PLACES_CHUNKS
        self._connection = connection
        self._missing = missing
        self._table: PlaceTable | None = None
        self._asked = 0
        self._lock = threading.Lock()  # counts the asks
        self._loading = threading.Lock()  # held while the table is read

    def table(self) -> PlaceTable | None:
        """The table, once read; the LOAD_AFTER-th call starts reading it on a thread of its own
        (the caller reads its rows from SQLite meanwhile)."""
        if self._table is not None or not self._enabled:
            return self._table
        with self._lock:
            self._asked += 1
            start = self._asked == LOAD_AFTER
        if start:
            in_background(self.load)
        return None

    def load(self) -> None:
        """Read the table now, or wait for the read under way (the thread started by :meth:`table`
        reads it; tests and benchmarks call this to have it read). A store found damaged or closed
        meanwhile keeps reading from SQLite, whose answer says so."""
        with self._loading:
            if not self._enabled or self._table is not None:
                return
            try:
                with self._connection() as db:
                    table = PlaceTable.read(db, self._missing)
            except Exception:
                logger.debug("places.unread", exc_info=True)
                self._enabled = False
                return
            self._table = table


def in_background(work: Callable[[], None]) -> None:
    """Run ``work`` on a daemon thread of its own (a process exits without waiting for it)."""
    threading.Thread(target=work, name="mcpower-places", daemon=True).start()


class PlaceTable:
    """Every chunk's :class:`ChunkHit` but its text, as columns by ascending chunk id."""

    def __init__(
        self,
        columns: dict[str, NDArray[Any]],
        headings: list[Any],
        languages: list[Any],
        documents: dict[int, tuple[Any, ...]],
    ) -> None:
        self._ids = columns["id"]
        self._columns = columns
        self._headings, self._languages = headings, languages
        self._documents = documents  # by id: path, title, file_type, indexed_at, size, mtime
        self._hits: dict[int, ChunkHit] | None = None
        if len(self._ids) <= MAX_HITS_CHUNKS:
            self._hits = self._make(np.arange(len(self._ids)))

    @classmethod
    def read(cls, db: sqlite3.Connection, missing: frozenset[str]) -> PlaceTable:
        """Every chunk's place in ``db`` (a database missing optional columns reads their defaults).

        Raises:
            ValueError: a value the columns do not hold as SQLite gives it (of another type than
                ingest writes, or out of the column's range): read from SQLite instead.
            sqlite3.Error: the database could not be read.
        """

        def col(name: str) -> str:
            return OPTIONAL_COLUMNS[name] if name in missing else name

        integers = ("id", "document_id", "ordinal", "start_line", "end_line")
        pages = (col("page_start"), col("page_end"))
        typed = " AND ".join(f"typeof({c}) = 'integer'" for c in integers)
        typed += "".join(f" AND typeof({p}) IN ('integer', 'null')" for p in pages)
        typed += f" AND typeof(heading_path) = 'text' AND typeof({col('language')}) = 'text'"
        sql = (
            f"SELECT {', '.join(integers)}, {pages[0]} IS NULL, ifnull({pages[0]}, 0), {pages[1]} IS NULL,"
            f" ifnull({pages[1]}, 0), {typed}, heading_path, {col('language')} FROM {CHUNKS} ORDER BY id"
        )
        names = (*integers, "no_start", "page_start", "no_end", "page_end")
        wide = ("id", "document_id")
        parts: dict[str, list[NDArray[Any]]] = {n: [] for n in (*names, "heading", "language")}
        codes: dict[str, dict[Any, int]] = {"heading": {}, "language": {}}
        cursor = db.execute(sql)
        while batch := cursor.fetchmany(BATCH_ROWS):
            values = list(zip(*batch, strict=True))
            if not all(values[len(names)]):
                raise ValueError("a chunk's place holds a value of another type than ingest writes")
            for name, column in zip(names, values, strict=False):
                kind = np.int64 if name in wide else np.bool_ if name.startswith("no_") else np.int32
                parts[name].append(np.array(column, dtype=kind))  # OverflowError (a ValueError's kin) past int32
            for name, column in zip(("heading", "language"), values[len(names) + 1 :], strict=True):
                known = codes[name]
                parts[name].append(np.array([known.setdefault(v, len(known)) for v in column], dtype=np.int32))
        columns = {n: np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for n, p in parts.items()}
        if len(columns["id"]) > 1 and not (columns["id"][1:] > columns["id"][:-1]).all():
            raise ValueError("chunk ids not unique")
        shared: dict[tuple[type, Any], Any] = {}

        def same(value: Any) -> Any:  # one object for a value documents share (a type, an ingest's time)
            return shared.setdefault((type(value), value), value)

        documents = {
            i: (path, title, same(file_type), same(indexed_at), size, mtime)
            for i, path, title, file_type, indexed_at, size, mtime in db.execute(
                f"SELECT id, path, title, file_type, indexed_at, size, mtime FROM {DOCUMENTS}"
            )
        }
        return cls(columns, list(codes["heading"]), list(codes["language"]), documents)

    def hits(self, ids: Sequence[int]) -> dict[int, ChunkHit]:
        """The chunks with these ids, text '' (unknown ids, and chunks whose document is not there,
        are absent: what the SQL join gives)."""
        if self._hits is not None:
            return {i: hit for i in ids if (hit := self._hits.get(i)) is not None}
        if not len(self._ids):
            return {}
        want = np.fromiter(ids, dtype=np.int64, count=len(ids))
        at = np.minimum(np.searchsorted(self._ids, want), len(self._ids) - 1)
        return self._make(at[self._ids[at] == want])

    def _make(self, rows: NDArray[np.intp]) -> dict[int, ChunkHit]:
        c, headings, languages, documents = self._columns, self._headings, self._languages, self._documents
        out: dict[int, ChunkHit] = {}
        for i, document, ordinal, heading, start, end, no_start, page_start, no_end, page_end, language in zip(
            *(c[n][rows].tolist() for n in ("id", "document_id", "ordinal", "heading", "start_line", "end_line")),
            *(c[n][rows].tolist() for n in ("no_start", "page_start", "no_end", "page_end", "language")),
            strict=True,
        ):
            doc = documents.get(document)
            if doc is None:
                continue
            path, title, file_type, indexed_at, size, mtime = doc
            out[i] = ChunkHit.of_row(
                (
                    i,
                    ordinal,
                    headings[heading],
                    start,
                    end,
                    "",
                    path,
                    title,
                    file_type,
                    document,
                    indexed_at,
                    size,
                    mtime,
                    None if no_start else page_start,
                    None if no_end else page_end,
                    languages[language],
                )
            )
        return out

    @property
    def nbytes(self) -> int:
        """The columns' bytes (the headings', languages' and documents' strings not counted)."""
        return sum(int(a.nbytes) for a in self._columns.values())
