"""Where every chunk of a small dataset is, held in memory: what ranking and grouping read.

A grouped search (passages.py) ranks ~50 candidates and reads each one's place (document, section,
position, lines) and the fields the priors read (path, title), against ~5 for an ungrouped one: read
from SQLite, those rows were most of what grouping cost (issue 30.1). So a dataset of up to
MAX_PLACES_CHUNKS chunks reads every chunk's row, without its text, once (after its first few
searches, on a thread of its own: a one-off search never pays for it), and then answers
``LocalStore.chunks(ids, text=False)`` from memory; a bigger one reads the rows it is asked for
(without their text) each time, so memory stays bounded (about 1 KB a chunk: 3.4k chunks take
~3 MB, the cap ~10 MB).

The table belongs to one LocalStore, that is to one published version of a dataset: a republished
dataset (an ingest, ``--watch``) is opened as a new store, with a new table; nothing is shared
between versions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from mcpower.store import ChunkHit

logger = logging.getLogger(__name__)

# Datasets up to this many chunks keep every chunk's place in memory (about 1 KB each; reading
# them takes ~10 ms per thousand chunks, in the background).
MAX_PLACES_CHUNKS = 10_000
# The table is read once a store has been asked this many times (a few searches): a one-off search
# (`mcpower search`, a cold start) never pays for it; a server reads it on its own thread meanwhile.
LOAD_AFTER = 6


class Places:
    """Every chunk's place of one store version, or None while not read (yet) or too big to hold."""

    def __init__(self, chunks: int, read_all: Callable[[], list[Sequence[Any]]]) -> None:
        self._enabled = chunks <= MAX_PLACES_CHUNKS
        self._read_all = read_all
        self._table: dict[int, ChunkHit] | None = None
        self._asked = 0
        self._lock = threading.Lock()

    def table(self) -> dict[int, ChunkHit] | None:
        """The chunks by id (text ''), once read; the LOAD_AFTER-th call starts reading them on a
        thread of their own (the caller reads its rows from SQLite meanwhile)."""
        if self._table is not None or not self._enabled:
            return self._table
        with self._lock:
            self._asked += 1
            start = self._asked == LOAD_AFTER
        if start:
            in_background(self.load)
        return None

    def load(self) -> None:
        """Read the table now (the thread started by :meth:`table` does; tests call it directly).
        A store found damaged or closed meanwhile keeps reading from SQLite, whose answer says so."""
        if not self._enabled or self._table is not None:
            return
        try:
            table = _load(self._read_all())
        except Exception:
            logger.debug("places.unread", exc_info=True)
            self._enabled = False
            return
        self._table = table


def in_background(work: Callable[[], None]) -> None:
    """Run ``work`` on a daemon thread of its own (a process exits without waiting for it)."""
    threading.Thread(target=work, name="mcpower-places", daemon=True).start()


def _load(rows: list[Sequence[Any]]) -> dict[int, ChunkHit]:
    return {hit.id: hit for hit in map(ChunkHit.of_row, rows)}


def read_rows(connection: Callable[[], Any], sql: str) -> Callable[[], list[Sequence[Any]]]:
    """A reader of every row of ``sql`` (a place SELECT) through ``connection`` (a pool's)."""

    def read() -> list[Sequence[Any]]:
        with connection() as db:
            rows: list[Sequence[Any]] = db.execute(sql).fetchall()
        return rows

    return read
