"""Where every chunk of a small dataset is, held in memory: what ranking and grouping read.

A grouped search (passages.py) ranks ~50 candidates and reads each one's place (document, section,
position, lines) and the fields the priors read (path, title), against ~5 for an ungrouped one: read
from SQLite, those rows were most of what grouping cost (issue 30.1). So a dataset of up to
MAX_PLACES_CHUNKS chunks reads every chunk's row, without its text, once, at its first search, and
answers ``LocalStore.chunks(ids, text=False)`` from memory; a bigger one reads the rows it is asked
for (without their text) each time, so memory stays bounded by the size (about 1 KB a chunk here:
3.4k chunks take ~3 MB, the cap ~20 MB).

The table belongs to one LocalStore, that is to one published version of a dataset: a republished
dataset (an ingest, ``--watch``) is opened as a new store, with a new table; nothing is shared
between versions. Document fields repeated on every chunk row (path, title, file type, indexed at)
are held once per document.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from mcpower.store import ChunkHit

# Datasets up to this many chunks keep every chunk's place in memory (about 1 KB each).
MAX_PLACES_CHUNKS = 20_000


class Places:
    """Every chunk's place of one store version (loaded on first use), or None when too big."""

    def __init__(self, chunks: int, read_all: Callable[[], list[Sequence[Any]]]) -> None:
        self._enabled = chunks <= MAX_PLACES_CHUNKS
        self._read_all = read_all
        self._table: dict[int, ChunkHit] | None = None
        self._lock = threading.Lock()

    def table(self) -> dict[int, ChunkHit] | None:
        """The chunks by id (text ''), read at the first call; None for a dataset too big to hold."""
        if not self._enabled:
            return None
        if self._table is None:
            with self._lock:
                if self._table is None:
                    self._table = _load(self._read_all())
        return self._table


def _load(rows: list[Sequence[Any]]) -> dict[int, ChunkHit]:
    shared: dict[Any, Any] = {}  # one copy of each repeated string (paths, titles, heading paths ...)
    table: dict[int, ChunkHit] = {}
    for row in rows:
        hit = ChunkHit.of_row([shared.setdefault(v, v) if isinstance(v, str) else v for v in row])
        table[hit.id] = hit
    return table


def read_rows(connection: Callable[[], Any], sql: str) -> Callable[[], list[Sequence[Any]]]:
    """A reader of every row of ``sql`` (a place SELECT) through ``connection`` (a pool's)."""

    def read() -> list[Sequence[Any]]:
        with connection() as db:
            rows: list[Sequence[Any]] = db.execute(sql).fetchall()
        return rows

    return read
