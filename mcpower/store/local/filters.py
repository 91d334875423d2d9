"""Search filters (path, folder, file type) turned into the chunks they allow, once per filter.

A search asks for both candidate lists under one filter, and clients repeat filters, so the allowed
chunks are remembered (the last :data:`FILTER_CACHE_SIZE` filters): their ids, their rows in the
keyword postings, and the FAISS id selector the vector side walks the graph with, each made once
(at a million chunks a broad filter allows ~500k chunks: building the selector's hash set took
~25 ms, and sorting the rows as much, on every search). The SQL uses the documents' path index for
a path or a folder (a range of paths), so only the documents allowed are read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.results import SearchFilters, normalize_rel
from mcpower.store.local.pool import ConnectionPool
from mcpower.store.local.schema import CHUNKS, DOCUMENTS

if TYPE_CHECKING:
    from numpy.typing import NDArray

# Filters whose allowed chunks are remembered; each entry is two int64 per allowed chunk, and the
# selector's hash set (~40 bytes per allowed chunk once built).
FILTER_CACHE_SIZE = 16


@dataclass
class Allowed:
    """The chunks one filter allows."""

    ids: NDArray[np.int64]  # chunk ids, ascending
    rows: NDArray[np.int64]  # their positions among all chunk ids (the postings' rows), ascending
    _selector: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def selector(self) -> Any:
        """A FAISS IDSelectorBatch of these ids, made once (it is only read by searches)."""
        with self._lock:
            if self._selector is None:
                import faiss

                self._selector = faiss.IDSelectorBatch(self.ids)
            return self._selector


class FilterCache:
    """The allowed chunks of the last filters used on one loaded version."""

    def __init__(self, ids: NDArray[np.int64], db: ConnectionPool) -> None:
        self._ids, self._db = ids, db  # every chunk id, ascending
        self._cache: OrderedDict[SearchFilters, Allowed] = OrderedDict()
        self._lock = threading.Lock()

    def allowed(self, where: SearchFilters | None) -> Allowed | None:
        """The chunks whose document passes ``where`` (None: no filter, all pass)."""
        if where is None or not where.active:
            return None
        with self._lock:
            cached = self._cache.get(where)
            if cached is not None:
                self._cache.move_to_end(where)
                return cached
        sql, args = filter_sql(where)
        with self._db.connection() as db:
            rows = db.execute(f"SELECT c.id FROM {DOCUMENTS} d JOIN {CHUNKS} c ON c.document_id = d.id {sql}", args)
            ids = np.sort(np.fromiter((i for (i,) in rows), dtype=np.int64))
        at = np.searchsorted(self._ids, ids)
        known = at < len(self._ids)
        known[known] = self._ids[at[known]] == ids[known]
        found = Allowed(ids[known], at[known].astype(np.int64))
        with self._lock:
            self._cache[where] = found
            while len(self._cache) > FILTER_CACHE_SIZE:
                self._cache.popitem(last=False)  # the least recently used
        return found


def filter_sql(filters: SearchFilters) -> tuple[str, list[Any]]:
    """The WHERE clause (over documents ``d``) and its arguments for ``filters``."""
    clauses: list[str] = []
    args: list[Any] = []
    if filters.path:
        clauses.append("d.path = ?")
        args.append(normalize_rel(filters.path))
    if filters.folder and normalize_rel(filters.folder):
        folder = normalize_rel(filters.folder) + "/"
        # The paths that start with `folder/`: a range of the path index ('0' follows '/').
        clauses.append("d.path >= ? AND d.path < ?")
        args += [folder, folder[:-1] + "0"]
    if filters.file_type:
        ft = filters.file_type.lower()
        clauses.append("d.file_type = ?")
        args.append(ft if ft.startswith(".") else "." + ft)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args
