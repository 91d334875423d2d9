"""The exact vectors beside a quantised index: ``vectors.f32``, read from disk a few rows at a time.

An ``hnsw_sq`` version keeps its vectors twice: as 8-bit codes inside the FAISS file (HNSW walks
those, a quarter of the memory: 0.4 GB at a million 384-d chunks instead of 1.5 GB) and as float32
here, rows in the index's insertion order, nothing else in the file (its size is rows x dimension x
4 bytes, checked when it is opened). Search re-scores the graph's candidates with these exact
vectors, so the cosines fusion sees are the same as a flat index's; a chunk's vector for hybrid
scoring or re-ingest comes from here too.

Rows are read with ``pread`` into a fresh array, never memory-mapped: the file's pages stay in the
page cache, shared and reclaimable, and out of the server's resident memory, which a mapping touched
by every search would otherwise grow towards the file's size. Adjacent rows are read in one call
(a filter's chunks are mostly runs of one document's rows); a search's hundred or so scattered
candidates are read one ``preadv`` each, straight into the array returned.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mcpower.store.local.filters import Allowed

VECTORS_FILE = "vectors.f32"
# Rows written per block when the file is made: bounded memory whatever the dataset's size.
WRITE_ROWS = 16384
# At most this many bytes per read when rows are adjacent (a long run is split).
_MAX_READ = 4 << 20
# Rows this close share a read (the rows between are read and dropped): fewer system calls.
_GAP = 4
# A run of this many rows or more is read on its own, with no copy to join it to others.
_LONG_RUN = 64
# Up to this many rows (a search's ~100 candidates, scattered) are read one call each, straight into
# the array returned: finding runs among so few costs more than it saves (100 rows of 384
# dimensions: 0.52 against 1.07 ms a read, under a profiler).
_FEW_ROWS = 256


class VectorFile:
    """The float32 rows of one version's ``vectors.f32``, through a descriptor of its own."""

    def __init__(self, fd: int, rows: int, dimension: int) -> None:
        """Take ``fd`` (closed with :meth:`close`) if the file holds exactly ``rows`` x ``dimension`` floats.

        Raises:
            ValueError: the file's size says otherwise.
        """
        size = os.fstat(fd).st_size
        if size != rows * dimension * 4:
            raise ValueError(
                f"{size} bytes, where {rows} vectors of {dimension} dimensions take {rows * dimension * 4}"
            )
        self.fd, self.rows, self.dimension = fd, rows, dimension
        self._row_bytes = dimension * 4

    def close(self) -> None:
        os.close(self.fd)

    def read(self, rows: NDArray[np.int64]) -> NDArray[np.float32]:
        """The vectors of these rows, in the order given, shape (len(rows), dimension).

        Raises:
            ValueError: a row out of range, or the file changed under the reader.
        """
        out = np.empty((len(rows), self.dimension), dtype=np.float32)
        if not len(rows):
            return out
        if rows.min() < 0 or rows.max() >= self.rows:
            raise ValueError("a vector row outside the file")
        if len(rows) <= _FEW_ROWS and hasattr(os, "preadv"):  # a search's candidates: each row read into its place
            rb = self._row_bytes
            for at, row in enumerate(rows.tolist()):
                if os.preadv(self.fd, [out[at].data], row * rb) != rb:
                    raise ValueError("the vectors file changed while it was read")
            return out
        order = np.argsort(rows, kind="stable")
        wanted = rows[order]
        rb, most = self._row_bytes, _MAX_READ // self._row_bytes
        firsts, lasts = _runs(wanted, most)
        spans = lasts - firsts + 1
        at = np.cumsum(spans) - spans  # each run's first row in the rows read
        run_of = np.searchsorted(firsts, wanted, side="right") - 1
        # Runs are read in batches of about `most` rows: one join and one gather a batch, and no
        # buffer much over _MAX_READ (a fresh large buffer costs more in page faults than the reads).
        # A long run is a batch of its own, read straight into the bytes it is gathered from.
        long = spans >= _LONG_RUN
        cuts = np.flatnonzero((np.diff(at // most) != 0) | long[1:] | long[:-1]) + 1
        for r0, r1 in zip([0, *cuts.tolist()], [*cuts.tolist(), len(firsts)]):
            data = b"".join(
                [os.pread(self.fd, n * rb, f * rb) for f, n in zip(firsts[r0:r1].tolist(), spans[r0:r1].tolist())]
            )
            if len(data) != int(spans[r0:r1].sum()) * rb:
                raise ValueError("the vectors file changed while it was read")
            w0, w1 = np.searchsorted(run_of, (r0, r1))
            mine = run_of[w0:w1]
            block = np.frombuffer(data, dtype=np.float32).reshape(-1, self.dimension)
            out[order[w0:w1]] = block[at[mine] - at[r0] + wanted[w0:w1] - firsts[mine]]
        return out


def _runs(sorted_rows: NDArray[np.int64], max_rows: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(first rows, last rows) of the runs that cover ``sorted_rows``: rows within a few of each
    other share a run (the rows between are read and dropped), and no run spans ``max_rows`` or more.
    Worked out with numpy: a search's ~100 scattered rows are ~100 runs, one ``pread`` each."""
    apart = np.diff(sorted_rows) > _GAP
    # Within a group of close rows, a new run every max_rows rows from the group's first row.
    group = np.concatenate(([0], np.cumsum(apart)))
    group_first = sorted_rows[np.concatenate(([0], np.flatnonzero(apart) + 1))][group]
    piece = (sorted_rows - group_first) // max_rows
    new = np.ones(len(sorted_rows), dtype=bool)
    new[1:] = apart | (np.diff(piece) != 0)
    starts = np.flatnonzero(new)
    stops = np.concatenate((starts[1:], [len(sorted_rows)])) - 1
    return sorted_rows[starts], sorted_rows[stops]


def write_vector_file(path: os.PathLike[str] | str, blocks: Iterable[NDArray[np.float32]]) -> int:
    """Write ``blocks`` of float32 rows, in order, to ``path`` (created, not overwritten); returns the rows."""
    rows = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            for block in blocks:
                f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
                rows += len(block)
    finally:
        os.close(fd)
    return rows


# Candidates the quantised graph hands over for each result wanted, re-scored exactly: the codes'
# cosines are within ~0.005 of the exact ones, so the true top k is among twice as many (recall@10
# with re-scoring equals the float graph's; benchmarks/suite/search.py measures it).
RESCORE_FACTOR = 2
# With a filter this selective, HNSW's graph walk may miss; score the few allowed vectors exactly.
EXACT_FILTER_MAX = 8192


class VectorSide:
    """The vector half of a loaded version: its FAISS index and, for ``hnsw_sq``, its exact vectors.

    ``ids`` are every chunk id, ascending. Thread-safe: FAISS searches and ``pread`` run in parallel.
    """

    def __init__(self, index: Any, ids: NDArray[np.int64], floats: VectorFile | None, hnsw: bool) -> None:
        import faiss

        self.index, self.floats, self.hnsw = index, floats, hnsw
        if floats is not None:
            # Chunk id -> row of the vectors file (the index's insertion order, which its id map keeps).
            inserted = faiss.vector_to_array(index.id_map).astype(np.int64, copy=False)
            self._order = np.argsort(inserted, kind="stable")
            if not np.array_equal(inserted[self._order], ids):
                raise ValueError("the vector index's ids are not the chunks' ids")
        self._ids = ids

    def close(self) -> None:
        if self.floats is not None:
            self.floats.close()

    def rows(self, ids: Sequence[int] | NDArray[np.int64]) -> NDArray[np.int64]:
        """Rows of the vectors file for these chunk ids.

        Raises:
            KeyError: an id that is not a chunk of this version.
        """
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.searchsorted(self._ids, wanted)
        if len(wanted) and (at.max() >= len(self._ids) or not np.array_equal(self._ids[at], wanted)):
            raise KeyError("not a chunk of this version")
        return np.asarray(self._order[at], dtype=np.int64)

    def vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        """The exact vectors of these chunk ids, in order."""
        if self.floats is not None:
            return self.floats.read(self.rows(ids))
        if not len(ids):
            return np.zeros((0, int(self.index.d)), dtype=np.float32)
        # One call through the id map (IndexIDMap2) for all of them: 20x faster than one a vector.
        return np.asarray(self.index.reconstruct_batch(np.asarray(ids, dtype=np.int64)), dtype=np.float32)

    def search(self, vector: NDArray[np.float32], k: int, allowed: Allowed | None) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, cosine) pairs, best first, among the ``allowed`` chunks (None: all)."""
        import faiss

        ntotal = int(self.index.ntotal)
        if ntotal == 0:
            return []
        q = np.ascontiguousarray(vector.reshape(1, -1), dtype=np.float32)
        params: Any = None
        if allowed is not None:
            if not len(allowed):
                return []
            if len(allowed) <= EXACT_FILTER_MAX and self.hnsw:
                return self._exact(allowed.ids, q[0], k)
            selector = allowed.selector()  # kept by `allowed`: it must outlive the search (SWIG keeps no reference)
            params = faiss.SearchParameters()
            params.sel = selector
        wanted = min(k * RESCORE_FACTOR if self.floats is not None else k, ntotal)
        with one_omp_thread(faiss):
            scores, found = self.index.search(q, wanted, params=params)
        if self.floats is None:
            return _clean(found[0], scores[0])
        candidates = found[0][found[0] >= 0]
        return self._exact(candidates, q[0], k)

    def _exact(self, ids: NDArray[np.int64], q: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        sims = self.vectors(ids.tolist()) @ q
        order = np.argsort(-sims, kind="stable")[:k]
        return _clean(ids[order], sims[order])


def _clean(ids: NDArray[np.int64], scores: NDArray[np.float32]) -> list[tuple[int, float]]:
    # FAISS pads with -1 and a damaged index could return anything: keep finite scores only.
    keep = (ids >= 0) & np.isfinite(scores)
    return list(zip(ids[keep].tolist(), scores[keep].tolist()))


@contextmanager
def one_omp_thread(faiss: Any) -> Iterator[None]:
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
