"""Keyword matches scored on demand: the best k by block-max bounds, and the BM25 of given chunks,
from the per-term postings (keyword.py), without scoring every chunk that holds a term.

A query's OR of terms matches about half of a large corpus (a million chunks: ~500k matches, 20 ms
to add up every posting of every term). Search needs much less: the top k by BM25 (k = 50 or so)
and the BM25 of the semantic side's candidates. So:

- **top(k)** scores whole cells of chunk rows in descending order of their bound, the sum of each
  term's highest impact in the cell, until no cell left can reach the k-th score (blockmax.py).
  A list's cells are computed when block-max first asks for them and kept with it in
  :class:`PostingsCache`. Below :data:`BLOCKMAX_MIN_CHUNKS`, or for a question whose lists hold
  :data:`FULL_COUNT_SHARE` postings a chunk, every posting is added up instead: cheaper there;
  only the rows at or above a lower bound of the k-th score (the maxima of blocks of rows) are sorted.
- **top(k)** by MaxScore (maxscore.py) is kept beside it, to be measured against
  (benchmarks/keyword_scale.py).
- **scores_of(ids)** looks each chunk up in each term's list (binary search: the lists are sorted).

Every score is summed in the query's term order, starting from 0.0, exactly as
``keyword.combine``'s bincount sums them, so the numbers (and so the order of equal scores) are
the ones :class:`~mcpower.store.local.keyword.KeywordHits` gives (tests/test_keyword.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.meanwhile import shared
from mcpower.store.local.blockmax import Cells, GaveUp, block_top, ranges
from mcpower.store.local.keyword import KeywordHits

if TYPE_CHECKING:
    from numpy.typing import NDArray

_ROW = np.dtype("<i4")
_IMPACT = np.dtype("<f4")
# Postings this long or longer are kept in memory once read (the common terms: every query that
# names them reads them again); shorter ones cost less to read than to keep. On a dataset of under
# 4096 x CACHE_MIN_SHARE chunks, lists from 1/CACHE_MIN_SHARE of its chunks are kept: there every
# list was short and re-read (~60 us each; the keyword side 0.84x at p50 on new questions with
# them kept, FastAPI docs; 0.89x at 100k; docs/benchmarks.md, round 12).
CACHE_MIN_ROWS, CACHE_MIN_SHARE = 4096, 256
# Bytes of postings kept per loaded dataset: a term in half of a million chunks takes 4 MB.
CACHE_BYTES = 96 << 20
# Block-max gives up on its bounds (and adds everything up) when the cells it still has to score
# hold this share of the chunks. Synthetic 1M, SciFact questions (load 4-6): at 0.25 the top 50 took
# p50 16.2 / p95 48.4 ms against every match's 25.7 / 41.8; at 0.1, 22.8 / 36.6 against 22.6 / 35.6.
GIVE_UP_SHARE = 0.1
# A query whose lists hold this many postings per chunk is not tried by block-max: it adds
# everything up at once, without computing cells for lists read for it. On the synthetic 1M
# dataset's 300 SciFact questions, block-max gave up on 156 of the 170 at 0.6 or more (and on
# 80 of the 130 below); a list read for the first time cost ~2 ms of cells per term.
FULL_COUNT_SHARE = 0.6
# Block-max is tried only on datasets larger than any measured: up to a million chunks adding every
# posting up was as fast or faster (keyword top 50 of 300 new SciFact questions, thread CPU p50 / p95
# ms, every posting against block-max with its 0.6 rule: 300k chunks 5.66 / 16.3 against 7.08 / 16.4,
# 1M 19.2 / 40.0 against 23.3 / 41.1; docs/benchmarks.md, round 7). Smaller datasets gain more.
BLOCKMAX_MIN_CHUNKS = 2_000_000
# Rows per block whose maxima bound the k-th score from below when every posting is added up: only
# the rows at or above it are sorted, not every match (~500k at a million chunks). Keyword top 50
# of 300 SciFact questions, thread CPU p50 / p95 ms, against sorting every match: 1M chunks 12.0 /
# 28.5 against 15.9 / 36.5; 100k 1.47 / 3.02 against 1.47 / 4.32 (docs/benchmarks.md, round 8).
BOUND_ROWS = 256
# From this many chunks, the rows at or above that bound are looked for only in the blocks whose
# maximum reaches it (about k blocks), not in every row again: ~0.14 ms whatever the size, against
# 0.045 / 0.25 / 0.85 ms for every row at 100k / 300k / 1M chunks (a scratch loop; the whole
# count's top 50 at 1M: 2.2-2.5 -> 1.6 ms a question; docs/benchmarks.md, round 10).
HOT_BLOCKS_MIN_ROWS = 200_000
# A count of this many postings is split in COUNT_PIECES pieces of rows (meanwhile.shared): a
# worker that comes free during it (the query's vector searched) counts pieces too.
SHARED_COUNT_POSTINGS, COUNT_PIECES = 500_000, 8


@dataclass(frozen=True)
class Postings:
    """One term's (or FTS5 phrase's) chunk rows, ascending, with the BM25 each adds there."""

    rows: NDArray[np.int32]
    impacts: NDArray[np.floating[Any]]  # float32 from the postings table; float64 from FTS5's bm25()
    bound: float  # the highest impact
    _cells: Cells | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, rows: NDArray[np.int32], impacts: NDArray[np.floating[Any]]) -> Postings:
        return cls(rows, impacts, float(impacts.max()) if len(impacts) else 0.0)

    @property
    def cells(self) -> Cells:
        """Its highest impact per cell of chunk rows (blockmax.py), computed when first asked and
        kept: a query that adds everything up never needs them. Two threads may both compute them
        at once; the results are equal, either is kept."""
        if self._cells is None:
            object.__setattr__(self, "_cells", Cells.of(self.rows, self.impacts))
        assert self._cells is not None
        return self._cells

    @property
    def nbytes(self) -> int:
        """Its size in memory once its cells are computed (at most that before)."""
        return self.list_nbytes + Cells.most_bytes(self.rows, self.impacts.itemsize)

    @property
    def list_nbytes(self) -> int:
        """Its rows and impacts alone: its size while its cells are not computed."""
        return int(self.rows.nbytes + self.impacts.nbytes)

    def lookup(self, rows: NDArray[np.int64]) -> NDArray[np.float64]:
        """The impact of this term at each of ``rows`` (0.0 where it is absent): a binary search each."""
        at = np.searchsorted(self.rows, rows)
        at[at == len(self.rows)] = 0
        out = np.zeros(len(rows), dtype=np.float64)
        if len(self.rows):
            hit = self.rows[at] == rows
            out[hit] = self.impacts[at[hit]]
        return out


class PostingsCache:
    """The long postings of one dataset's common terms, kept after their first read (LRU by bytes).

    A list is counted at what it may come to hold: with its cells on a dataset block-max may search
    (:func:`uses_cells`), its rows and impacts alone on a smaller one, whose lists never compute
    cells (counting cells there left ~half of the budget unused at a million chunks).
    """

    def __init__(self, chunks: int, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self._chunks = chunks
        self._lists: OrderedDict[str, tuple[Postings, int]] = OrderedDict()  # with the bytes counted
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, term: str) -> Postings | None:
        with self._lock:
            found = self._lists.get(term)
            if found is not None:
                self._lists.move_to_end(term)
            return found[0] if found is not None else None

    def put(self, term: str, postings: Postings) -> None:
        size = postings.nbytes if uses_cells(self._chunks) else postings.list_nbytes
        if len(postings.rows) < min(CACHE_MIN_ROWS, self._chunks // CACHE_MIN_SHARE) or size > self.budget:
            return
        with self._lock:
            if term in self._lists:
                return
            self._lists[term] = (postings, size)
            self._bytes += size
            while self._bytes > self.budget:
                _, (_, dropped) = self._lists.popitem(last=False)
                self._bytes -= dropped

    @property
    def nbytes(self) -> int:
        """The bytes its lists are counted at."""
        return self._bytes


def uses_cells(chunks: int) -> bool:
    """Whether block-max may search a dataset of ``chunks`` chunks, computing its lists' cells."""
    return chunks >= BLOCKMAX_MIN_CHUNKS


def postings_of(blobs: tuple[bytes, bytes], n: int) -> Postings:
    """A term's postings from its two blobs, checked against the chunk count ``n``.

    Raises:
        ValueError: lengths that disagree, rows out of range or not ascending (a database not
            written by ingest).
    """
    rows = np.frombuffer(blobs[0], dtype=_ROW)
    impacts = np.frombuffer(blobs[1], dtype=_IMPACT)
    if len(rows) != len(impacts):
        raise ValueError("keyword postings of unequal lengths")
    if len(rows) and (rows[0] < 0 or rows[-1] >= n or not (rows[1:] > rows[:-1]).all()):  # no diff array made
        raise ValueError("keyword postings point past the chunk table, or out of order")
    return Postings.of(rows, impacts)


def fts_postings(ids: NDArray[np.int64], scores: Sequence[tuple[int, float]]) -> Postings:
    """The rows FTS5 scored itself (multi-token phrases), as one more list: negative scores count 0.

    Raises:
        ValueError: a row that is not a chunk.
    """
    fts_ids = np.array([i for i, _ in scores], dtype=np.int64)
    rows = np.searchsorted(ids, fts_ids)
    if len(rows) and (rows.max() >= len(ids) or not np.array_equal(ids[rows], fts_ids)):
        raise ValueError("keyword postings point past the chunk table")
    order = np.argsort(rows, kind="stable")
    impacts = np.array([max(s, 0.0) for _, s in scores], dtype=np.float64)
    return Postings.of(rows[order].astype(_ROW), impacts[order])


class RankedMatches:
    """The chunks a keyword query matched (KeywordMatches), scored only as far as asked.

    ``lists`` are the query's postings in its term order; ``allowed`` the rows a filter lets
    through, ascending (None: all). The top k is found by block-max bounds (blockmax.py), or by
    every posting added up where that is cheaper; both are exact.
    """

    def __init__(
        self,
        ids: NDArray[np.int64],
        lists: Sequence[Postings],
        allowed: NDArray[np.int64] | None,
    ) -> None:
        self._ids, self._lists, self._allowed = ids, [p for p in lists if len(p.rows)], allowed
        self._top: list[tuple[int, float]] | None = None
        self._top_k = 0
        self._full: KeywordHits | None = None
        self._every: NDArray[np.float64] | None = None  # every row's BM25, once added up
        self._tops: NDArray[np.float64] | None = None  # its blocks' maxima, when counted in pieces

    # -- KeywordMatches

    def top(self, k: int) -> list[tuple[int, float]]:
        """The best ``k`` (chunk id, BM25) pairs, best first; equal scores by ascending id."""
        if self._top is not None and (k <= self._top_k or len(self._top) < self._top_k):
            return self._top[:k]  # a deeper ask of an exhausted list, or a shallower one: a prefix
        if k <= 0 or not self._lists:
            return []
        best = self._find(k)
        self._top, self._top_k = best, k
        return best

    def scores_of(self, ids: Iterable[int]) -> dict[int, float]:
        """BM25 of those of ``ids`` that matched (and that the filter allows)."""
        wanted = np.fromiter(ids, dtype=np.int64)
        at = np.searchsorted(self._ids, wanted)
        known = at < len(self._ids)
        known[known] = self._ids[at[known]] == wanted[known]
        rows, wanted = at[known].astype(np.int64), wanted[known]
        if self._allowed is not None:
            keep = members(rows, self._allowed)
            rows, wanted = rows[keep], wanted[keep]
        # The same sums either way: the rows' scores once every posting was added up, else a lookup
        # of each row in each list.
        scores = self._every[rows] if self._every is not None else self._scores(rows)
        hit = scores > 0
        return dict(zip(wanted[hit].tolist(), scores[hit].tolist()))

    # -- every match, as KeywordHits has them (for callers that want them all)

    @property
    def ids(self) -> NDArray[np.int64]:
        return self._everything().ids

    @property
    def scores(self) -> NDArray[np.float64]:
        return self._everything().scores

    def __len__(self) -> int:
        return len(self._everything())

    def _everything(self) -> KeywordHits:
        """Every match scored, as keyword.combine scores them (one bincount, the same sums)."""
        if self._full is None:
            scores = self._every_row()
            matched = np.flatnonzero(scores > 0)
            self._full = KeywordHits(self._ids[matched], scores[matched])
        return self._full

    def _every_row(self) -> NDArray[np.float64]:
        """The BM25 of every row (0.0 where nothing matched or the filter says no), summed as
        keyword.combine sums; added up once, then kept (scores_of reads it)."""
        if self._every is not None:
            return self._every
        if not self._lists:
            return np.zeros(len(self._ids), dtype=np.float64)
        n, lists, allowed = len(self._ids), self._lists, self._allowed
        pieces = COUNT_PIECES if sum(len(p.rows) for p in lists) >= SHARED_COUNT_POSTINGS else 1
        # Pieces of whole blocks of rows, each summing its rows' postings into its own part of the sums.
        step = -(-n // (pieces * BOUND_ROWS)) * BOUND_ROWS
        bounds = [min(i * step, n) for i in range(pieces + 1)]

        def cut(rows: NDArray[Any]) -> list[int]:  # where each piece's rows start in ``rows``
            return np.searchsorted(rows, bounds).tolist() if pieces > 1 else [0, len(rows)]

        cuts = [cut(p.rows) for p in lists]
        allowed_cuts = cut(allowed) if allowed is not None else []

        def count(i: int) -> NDArray[np.float64]:
            lo, hi = bounds[i], bounds[i + 1]
            # Joined straight into the types bincount works in (it would copy int32 rows to intp
            # again: 0.90-0.92x the time for 1.7M postings at 1M chunks); the same values, so the
            # same sums: each row's, in the query's term order from 0.0, whatever the pieces.
            rows = np.concatenate([p.rows[c[i] : c[i + 1]] for p, c in zip(lists, cuts, strict=True)], dtype=np.intp)
            if lo:
                rows -= lo
            weights = np.concatenate(
                [p.impacts[c[i] : c[i + 1]] for p, c in zip(lists, cuts, strict=True)], dtype=np.float64
            )
            part = np.bincount(rows, weights=weights, minlength=hi - lo).astype(np.float64, copy=False)
            if allowed is not None:
                keep = np.zeros(hi - lo, dtype=bool)
                keep[allowed[allowed_cuts[i] : allowed_cuts[i + 1]] - lo] = True
                part[~keep] = 0.0
            return part

        if pieces == 1:
            self._every = count(0)
        else:  # a worker that comes free meanwhile (the query's vector searched) counts pieces too
            every, tops = np.empty(n, dtype=np.float64), np.empty(n // BOUND_ROWS, dtype=np.float64)

            def into(i: int) -> None:  # and the maxima of its whole blocks, while they are in cache
                every[bounds[i] : bounds[i + 1]] = part = count(i)
                tops[bounds[i] // BOUND_ROWS : bounds[i + 1] // BOUND_ROWS] = _block_maxima(part)

            shared(into, pieces)
            self._every, self._tops = every, tops
        return self._every

    # -- scoring

    def _scores(self, rows: NDArray[np.int64]) -> NDArray[np.float64]:
        """BM25 at ``rows``, summed in the query's term order from 0.0 (as bincount sums)."""
        total = np.zeros(len(rows), dtype=np.float64)
        for p in self._lists:
            total += p.lookup(rows)
        return total

    def _find(self, k: int) -> list[tuple[int, float]]:
        """The best ``k``: by block-max bounds where they may pay, else every posting added up."""
        n = len(self._ids)
        if not uses_cells(n) or sum(len(p.rows) for p in self._lists) >= FULL_COUNT_SHARE * n:
            return self._counted(k, 0.0)
        found = block_top(n, self._lists, self._allowed, k, GIVE_UP_SHARE)
        if isinstance(found, GaveUp):
            return self._counted(k, found.threshold)
        return self._best(*found, k)

    def _counted(self, k: int, threshold: float) -> list[tuple[int, float]]:
        """The best ``k`` with every row added up, sorting only the rows at or above a lower bound
        of the k-th score: ``threshold`` (> 0: a k-th score block-max found already), or else the
        k-th highest of the maxima of :data:`BOUND_ROWS`-row blocks (k blocks each hold a row that
        high). Too few blocks for that: every match, as KeywordHits sorts them."""
        scores = self._every_row()
        blocks = len(scores) // BOUND_ROWS
        tops = None
        if threshold <= 0 and blocks > k:
            tops = self._tops if self._tops is not None else _block_maxima(scores)
            threshold = float(np.partition(tops, blocks - k)[blocks - k])
        if threshold <= 0:
            return self._everything().top(k)
        if tops is None or len(scores) < HOT_BLOCKS_MIN_ROWS:
            rows = np.flatnonzero(scores >= threshold)
        else:  # such rows are in the blocks whose highest reaches it (about k), or past the last whole
            # block: only those are looked at, not every row again
            starts = np.flatnonzero(tops >= threshold) * BOUND_ROWS
            rows = np.concatenate([ranges(starts, starts + BOUND_ROWS), np.arange(blocks * BOUND_ROWS, len(scores))])
            rows = rows[scores[rows] >= threshold]
        return self._best(rows, scores[rows], k)

    def _best(self, rows: NDArray[np.int64], scores: NDArray[np.float64], k: int) -> list[tuple[int, float]]:
        """The best ``k`` of scored ``rows`` as (chunk id, BM25), equal scores by ascending id."""
        ids = self._ids[rows]
        order = np.lexsort((ids, -scores))[:k]
        return list(zip(ids[order].tolist(), scores[order].tolist()))


def _block_maxima(sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """The highest of each whole :data:`BOUND_ROWS`-row block of ``sums`` (a shorter tail has none)."""
    blocks = len(sums) // BOUND_ROWS
    out: NDArray[np.float64] = sums[: blocks * BOUND_ROWS].reshape(blocks, BOUND_ROWS).max(axis=1)
    return out


def members(rows: NDArray[np.int64], allowed: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Which of ``rows`` are in ``allowed`` (ascending)."""
    at = np.searchsorted(allowed, rows)
    inside = at < len(allowed)
    inside[inside] = allowed[at[inside]] == rows[inside]
    return inside
