"""Read-only SQLite connections to one published database, one per concurrent reader.

A published version never changes (it is opened with ``immutable=1``), so readers need no lock
between them: each borrows a connection of its own for one query and gives it back. Connections
are made on demand and reused, so there are never more than the most readers that ever ran at
once (the server's worker threads bound that).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mcpower.errors import IndexMismatchError


class ConnectionPool:
    """Connections to the database at ``uri`` (a ``file:`` URI with ``mode=ro&immutable=1``).

    Without a ``uri`` (an in-memory database, say) there is only ``first``, and readers take turns.
    ``source`` names the database (``dataset: path``) in the error a damaged one gives.
    """

    def __init__(
        self, uri: str | None, first: sqlite3.Connection, keep_fd: int | None = None, source: str | None = None
    ) -> None:
        self._uri = uri
        self._keep_fd = keep_fd  # a descriptor ``uri`` names (/proc/self/fd/N): closed with the pool
        self._source = source
        self._idle = [first]
        self._lock = threading.Condition()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection no other thread uses until the block ends.

        Opening checks the schema and the counts, not every page: a database damaged past those
        (with a checksum forged to match) can fail when a query first reads the damaged page. That
        is said as opening says it, an IndexMismatchError naming the dataset, so a search of several
        datasets leaves this one out and the others answer (search.py).

        Raises:
            sqlite3.ProgrammingError: the pool was closed (as a closed connection would).
            IndexMismatchError: SQLite found the database malformed (or could not read it).
        """
        with self._lock:
            while self._uri is None and not self._idle and not self._closed:
                self._lock.wait()
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            db = self._idle.pop() if self._idle else None
        if db is None:
            assert self._uri is not None
            db = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        try:
            yield db
        except sqlite3.ProgrammingError:
            raise  # a closed pool or a bug: not the file's fault
        except sqlite3.DatabaseError as e:
            if self._source is None:
                raise
            raise IndexMismatchError(
                f"{self._source} is not a readable SQLite database ({e}); re-run `mcpower ingest`"
            ) from e
        finally:
            with self._lock:
                keep = not self._closed
                if keep:
                    self._idle.append(db)
                    self._lock.notify()
            if not keep:
                db.close()

    def close(self) -> None:
        """Close the idle connections now and the borrowed ones when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._lock.notify_all()
        for db in idle:
            db.close()
        if self._keep_fd is not None:
            os.close(self._keep_fd)  # connections already open keep their own descriptors
            self._keep_fd = None
