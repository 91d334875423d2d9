"""The exact top k of a keyword query by block-max bounds over a fixed grid of chunk rows.

MaxScore (postings.py) stops early only once the terms it has not walked can no longer reach the
k-th score; a long question names many common terms whose bounds add up to more than that, so at a
million chunks it walks lists of hundreds of thousands of rows and scores each of their chunks in
full. Block-max bounds (Ding & Suel, "Faster top-k document retrieval using block-max indexes",
SIGIR 2011) skip a list a block at a time instead. This is their numpy-friendly form:

- The chunk rows are cut into cells of 16 (row ``r`` is in cell ``r >> CELL_SHIFT``).
  Each term's postings carry, per cell that holds the term, its highest impact there and where the
  cell's postings start (:class:`Cells`, computed when the list is read and cached with it: no
  change to the dataset's files).
- A query's bound for a cell is the sum of its terms' cell maxima: no chunk of the cell scores more.
- Cells are scored exactly, every chunk of them, in descending order of bound, a batch at a time
  (each batch twice the last). The k-th best score found so far is the threshold; once no cell
  left has a bound that reaches it, no chunk outside can enter the top k (nor tie the k-th and win
  on its id): the answer is exact.

Scores are summed exactly as ``keyword.combine``'s bincount sums them: from 0.0, in the query's
term order, each float32 impact added as a float64 (tests/test_postings.py checks the bits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

# Rows per cell, as a power of two. Smaller cells bound tighter (a cell's bound sums each term's maximum over fewer
# chunks) but cost more per query: the bounds are added up over every cell a query's terms touch
# (a million chunks: 62,500 cells of 16). On the synthetic 1M dataset's SciFact questions, keyword
# top 50 p50 was 16 / 24 / 30 ms with cells of 16 / 32 / 64 rows (load 4, docs/benchmarks.md).
CELL_SHIFT = 4
# A term in at least this share of the cells its rows span keeps a bound for every one of them.
DENSE_CELLS = 1 / 4
# Cells scored in the first batch: enough chunks that the k-th score is a real one.
FIRST_CELLS = 256


@dataclass(frozen=True)
class Cells:
    """Where one term's postings fall on a grid of ``1 << shift`` rows a cell: its highest impact
    in each cell and the offset of each cell's first posting in the list (one more: its length).

    Sparse (``ids``: the cells holding the term, ascending, one bound and start each) for a term in
    few of the cells its rows span; dense (``ids`` None: a bound and start for every cell from 0 to
    its last, 0.0 and an empty range where it is absent) when it is in most of them, so a query adds
    its bounds as one slice and finds its cells' postings without a search.
    """

    shift: int
    ids: NDArray[np.int32] | None
    bounds: NDArray[np.floating[Any]]
    starts: NDArray[np.int32]

    @classmethod
    def of(cls, rows: NDArray[np.int32], impacts: NDArray[np.floating[Any]], shift: int | None = None) -> Cells:
        """The cells of postings ``rows`` (ascending) with their ``impacts`` (cells of ``1 << CELL_SHIFT`` rows by default)."""
        shift = CELL_SHIFT if shift is None else shift
        if not len(rows):
            return cls(shift, np.zeros(0, np.int32), np.zeros(0, impacts.dtype), np.zeros(1, np.int32))
        cell = rows >> shift
        firsts = np.concatenate([[0], np.flatnonzero(cell[1:] != cell[:-1]) + 1]).astype(np.int32)
        ids = cell[firsts]
        bounds = np.maximum.reduceat(impacts, firsts)
        span = int(ids[-1]) + 1
        if len(ids) < DENSE_CELLS * span:
            return cls(shift, ids.astype(np.int32), bounds, np.append(firsts, np.int32(len(rows))))
        every = np.zeros(span, dtype=bounds.dtype)
        every[ids] = bounds
        # Each cell's first posting is the count of postings in the cells before it: a cumulative
        # sum over the cells (a search per cell in the rows cost ~4 ms for a common term at 1M).
        counts = np.zeros(span + 1, dtype=np.int64)
        counts[ids + 1] = np.diff(np.append(firsts, np.int32(len(rows))))
        return cls(shift, None, every, np.cumsum(counts).astype(np.int32))

    @property
    def nbytes(self) -> int:
        return int((self.ids.nbytes if self.ids is not None else 0) + self.bounds.nbytes + self.starts.nbytes)

    @staticmethod
    def most_bytes(rows: NDArray[np.int32], impact_bytes: int) -> int:
        """The most :meth:`of` ``rows`` can take (on the default grid), known without computing it:
        sparse, an id, a bound and a start a cell holding the term (at most one a row); dense, a
        bound and a start a cell spanned, when the term may be in enough of them."""
        if not len(rows):
            return 4
        span = (int(rows[-1]) >> CELL_SHIFT) + 1
        sparse = (8 + impact_bytes) * min(len(rows), span)
        dense = (4 + impact_bytes) * span
        return 4 + (max(sparse, dense) if len(rows) >= DENSE_CELLS * span else sparse)

    def add_bounds(self, bound: NDArray[np.float64]) -> None:
        """Add this term's cell maxima to a query's ``bound`` of every cell."""
        if self.ids is None:
            bound[: len(self.bounds)] += self.bounds
        else:
            bound[self.ids] += self.bounds  # a term's cells are distinct: no lost update

    def postings_in(self, cells: NDArray[np.int64]) -> NDArray[np.int64]:
        """Positions in the list of this term's postings in ``cells`` (ascending)."""
        if self.ids is None:
            cells = cells[: np.searchsorted(cells, len(self.bounds))]
            return ranges(self.starts[cells].astype(np.int64), self.starts[cells + 1].astype(np.int64))
        if not len(self.ids):
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, cells), len(self.ids) - 1)
        at = at[self.ids[at] == cells]
        return ranges(self.starts[at].astype(np.int64), self.starts[at + 1].astype(np.int64))


class Scored(Protocol):
    """A term's postings as block_top reads them (postings.Postings)."""

    @property
    def rows(self) -> NDArray[np.int32]: ...
    @property
    def impacts(self) -> NDArray[np.floating[Any]]: ...
    @property
    def cells(self) -> Cells: ...


@dataclass(frozen=True)
class GaveUp:
    """block_top stopped: the bounds prune too little. No chunk below ``threshold`` (the k-th best
    score among the cells it scored, > 0) is in the top k, which narrows the caller's full count."""

    threshold: float


def block_top(
    n: int, lists: Sequence[Scored], allowed: NDArray[np.int64] | None, k: int, give_up: float = 1.0
) -> tuple[NDArray[np.int64], NDArray[np.float64]] | GaveUp:
    """The rows (in no particular order) and scores of every chunk that scores at least the k-th
    best (ties at the cut included), among ``n`` chunks, the ``allowed`` rows only (ascending; None:
    all). Fewer than ``k`` matches: all of them. :class:`GaveUp` once the cells still to score hold
    more than ``give_up`` of the chunks (the caller adds everything up instead).

    Raises:
        ValueError: ``lists`` on different grids.
    """
    shifts = {p.cells.shift for p in lists}
    if len(shifts) > 1:
        raise ValueError(f"keyword postings on different grids: cells of {sorted(1 << s for s in shifts)} rows")
    shift = shifts.pop() if shifts else CELL_SHIFT
    ncells = (n >> shift) + 1
    bound = np.zeros(ncells, dtype=np.float64)
    # Added in the query's term order, as the scores are: rounding is monotonic, so a chunk's score
    # (its terms' impacts, each at most the cell maximum added here) never exceeds its cell's bound.
    for p in lists:
        p.cells.add_bounds(bound)
    edges = None
    if allowed is not None:  # where each cell's allowed rows start in `allowed`
        edges = np.searchsorted(allowed, np.arange(ncells + 1, dtype=np.int64) << shift)
        bound[edges[1:] == edges[:-1]] = 0.0  # cells the filter empties
    live = np.flatnonzero(bound > 0)
    live_bound = bound[live]
    pending = np.ones(len(live), dtype=bool)
    rows = np.zeros(0, dtype=np.int64)
    scores = np.zeros(0, dtype=np.float64)
    threshold, batch = 0.0, FIRST_CELLS
    while True:
        todo = np.flatnonzero(pending & (live_bound >= threshold))  # a tie may still win on its id
        if not len(todo):
            break
        if threshold > 0 and (len(todo) << shift) > give_up * n:
            return GaveUp(threshold)  # most chunks left to score anyway: adding everything up is as cheap
        if len(todo) > batch:  # the highest bounds first: they raise the threshold soonest
            todo = todo[np.argpartition(-live_bound[todo], batch - 1)[:batch]]
        pending[todo] = False
        found_rows, found_scores = _score_cells(np.sort(live[todo]), shift, ncells, lists, allowed, edges)
        rows = np.concatenate([rows, found_rows])
        scores = np.concatenate([scores, found_scores])
        if len(scores) >= k:
            threshold = float(np.partition(scores, len(scores) - k)[len(scores) - k])
            keep = scores >= threshold  # ties at the cut stay in, to be ordered by id
            rows, scores = rows[keep], scores[keep]
        batch *= 2
    return rows, scores


def _score_cells(
    cells: NDArray[np.int64],
    shift: int,
    ncells: int,
    lists: Sequence[Scored],
    allowed: NDArray[np.int64] | None,
    edges: NDArray[np.int64] | None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Rows and exact scores (> 0) of the chunks in ``cells`` (ascending) that the filter allows."""
    low = (1 << shift) - 1  # a row's place in its cell
    slot = np.zeros(ncells, dtype=np.int64)  # where each cell's rows start in `total`
    slot[cells] = np.arange(len(cells), dtype=np.int64) << shift
    total = np.zeros(len(cells) << shift, dtype=np.float64)
    for p in lists:  # in the query's term order, as bincount adds them
        ix = p.cells.postings_in(cells)
        r = p.rows[ix]
        total[slot[r >> shift] + (r & low)] += p.impacts[ix]  # rows distinct within a list
    if allowed is not None and edges is not None:
        ok = allowed[ranges(edges[cells], edges[cells + 1])]
        keep = np.zeros(len(total), dtype=bool)
        keep[slot[ok >> shift] + (ok & low)] = True
        total[~keep] = 0.0
    hit = np.flatnonzero(total > 0)
    return (cells[hit >> shift] << shift) + (hit & low), total[hit]


def ranges(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.int64]:
    """The indices lo[0]..hi[0]-1, lo[1]..hi[1]-1, ... in one array."""
    lengths = hi - lo
    size = int(lengths.sum())
    if not size:
        return np.zeros(0, dtype=np.int64)
    out: NDArray[np.int64] = np.arange(size, dtype=np.int64)
    out += np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
    return out
