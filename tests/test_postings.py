"""Keyword matches scored on demand (store/local/postings.py): the top k (block-max, MaxScore) and the scores of
given chunks equal scoring every match (keyword.combine), to the bit, ties and filters included."""

from __future__ import annotations

import numpy as np
import pytest

from mcpower import meanwhile
from mcpower.store.local import blockmax, maxscore
from mcpower.store.local import postings as postings_module
from mcpower.store.local.keyword import combine
from mcpower.store.local.maxscore import MaxScoreMatches
from mcpower.store.local.postings import Postings, PostingsCache, RankedMatches, fts_postings, postings_of


def random_lists(rng: np.random.Generator, n: int, terms: int) -> list[Postings]:
    """Terms of very different lengths (a rare one, common ones) with BM25-like impacts; some
    impacts repeat, so equal scores happen."""
    out = []
    for _ in range(terms):
        share = rng.choice([0.002, 0.02, 0.2, 0.6])
        rows = np.flatnonzero(rng.random(n) < share).astype(np.int32)
        idf = rng.uniform(0.01, 8.0) if share < 0.5 else 1e-6
        impacts = (idf * rng.choice([0.5, 1.0, 1.5, 2.0], len(rows))).astype(np.float32)
        out.append(Postings.of(rows, impacts))
    if terms > 1:
        out.append(out[0])  # two query words stemmed to one term are counted twice, as before
    return out


def reference(ids: np.ndarray, lists: list[Postings], allowed: np.ndarray | None):  # type: ignore[no-untyped-def]
    mask = None
    if allowed is not None:
        mask = np.zeros(len(ids), dtype=bool)
        mask[allowed] = True
    single = [(p.rows.tobytes(), p.impacts.tobytes()) for p in lists if p.impacts.dtype == np.float32]
    fts = [(int(ids[r]), float(s)) for p in lists if p.impacts.dtype == np.float64 for r, s in zip(p.rows, p.impacts)]
    return combine(ids, single, fts, mask)


def force_blockmax(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block-max tried first whatever the dataset's size and the question's postings."""
    monkeypatch.setattr(postings_module, "BLOCKMAX_MIN_CHUNKS", 0)
    monkeypatch.setattr(postings_module, "FULL_COUNT_SHARE", 100.0)


@pytest.mark.parametrize("method", [RankedMatches, MaxScoreMatches])
@pytest.mark.parametrize("seed", range(12))
def test_top_k_and_scores_equal_scoring_every_match(
    seed: int, method: type[RankedMatches], monkeypatch: pytest.MonkeyPatch
) -> None:
    if seed % 3 == 1:  # small cells and batches: many cells skipped, many batches
        monkeypatch.setattr(blockmax, "CELL_SHIFT", 2)
        monkeypatch.setattr(blockmax, "FIRST_CELLS", 1)
    # cells' bounds dense, by share, or sparse
    monkeypatch.setattr(blockmax, "DENSE_CELLS", [0.0, 0.25, 2.0][(seed // 3) % 3])
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 5000))
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = random_lists(rng, n, int(rng.integers(1, 7)))
    if seed % 3 == 0:  # a phrase FTS5 scored itself, a negative score among them
        rows = rng.choice(n, 20, replace=False)
        lists.append(fts_postings(ids, [(int(ids[r]), float(rng.normal(2, 2))) for r in rows]))
    allowed = None if seed % 2 else np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)
    if seed % 4 == 1:  # the walk never falls back to adding everything up
        monkeypatch.setattr(maxscore, "FULL_SCAN_SHARE", 10.0)
    if seed % 2 == 0:  # block-max tried on every query, however few chunks and many postings
        force_blockmax(monkeypatch)
    full = reference(ids, lists, allowed)
    matches = method(ids, lists, allowed)

    for k in (1, 5, 10, 50, 3, n + 10):
        assert matches.top(k) == full.top(k)
    some = [*rng.choice(ids, 200).tolist(), 7, 8]  # ids that are no chunk are absent too
    assert matches.scores_of(some) == full.scores_of(some)
    assert np.array_equal(matches.ids, full.ids)
    assert np.array_equal(matches.scores, full.scores)


@pytest.mark.parametrize("seed", range(8))
def test_blockmax_giving_up_adds_everything_up_and_keeps_what_reaches_its_threshold(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings_module, "GIVE_UP_SHARE", 0.0)  # gives up once a first batch set a threshold
    force_blockmax(monkeypatch)
    monkeypatch.setattr(blockmax, "FIRST_CELLS", 1)
    monkeypatch.setattr(blockmax, "CELL_SHIFT", 2)
    outcomes: list[object] = []
    real = blockmax.block_top

    def watched(*args):  # type: ignore[no-untyped-def]
        outcomes.append(real(*args))
        return outcomes[-1]

    monkeypatch.setattr(postings_module, "block_top", watched)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(200, 4000))
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = random_lists(rng, n, int(rng.integers(2, 6)))  # repeated impacts: ties at the threshold
    allowed = None if seed % 2 else np.sort(rng.choice(n, n // 2, replace=False)).astype(np.int64)
    full = reference(ids, lists, allowed)
    for k in (1, 7, 50, 2):
        assert RankedMatches(ids, lists, allowed).top(k) == full.top(k)
    assert any(isinstance(o, blockmax.GaveUp) and o.threshold > 0 for o in outcomes)


@pytest.mark.parametrize("reason", ["many postings a chunk", "few chunks"])
def test_a_query_adds_everything_up_without_cells_when_blockmax_would_not_pay(
    reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if reason == "many postings a chunk":
        monkeypatch.setattr(postings_module, "BLOCKMAX_MIN_CHUNKS", 0)
    tried: list[int] = []
    monkeypatch.setattr(postings_module, "block_top", lambda *args: tried.append(1))
    rng = np.random.default_rng(7)
    n = 3000
    ids = np.arange(n, dtype=np.int64) * 2
    lists = random_lists(rng, n, 5)
    while reason == "many postings a chunk" and sum(len(p.rows) for p in lists) < postings_module.FULL_COUNT_SHARE * n:
        lists.append(random_lists(rng, n, 1)[0])
    for allowed in (None, np.arange(0, n, 3, dtype=np.int64)):
        for k in (1, 10, 50, n + 5):
            assert RankedMatches(ids, lists, allowed).top(k) == reference(ids, lists, allowed).top(k)
    assert not tried
    assert all(p._cells is None for p in lists)  # never computed
    assert all(p.nbytes >= p.rows.nbytes + p.impacts.nbytes + p.cells.nbytes for p in lists)  # counted at most


@pytest.mark.parametrize("seed", range(8))
def test_adding_everything_up_sorts_only_the_rows_its_block_bound_keeps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings_module, "BOUND_ROWS", [4, 16][seed % 2])  # many blocks on little data
    # The rows above the bound looked for in the blocks that reach it, or in every row.
    monkeypatch.setattr(postings_module, "HOT_BLOCKS_MIN_ROWS", 0 if seed < 4 else 10**9)
    sorted_rows: list[int] = []
    real = RankedMatches._best

    def watched(self, rows, scores, k):  # type: ignore[no-untyped-def]
        sorted_rows.append(len(rows))
        return real(self, rows, scores, k)

    monkeypatch.setattr(RankedMatches, "_best", watched)
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(2000, 6000))
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = random_lists(rng, n, int(rng.integers(2, 6)))  # repeated impacts: ties at the cut
    if seed % 4 == 0:  # a phrase FTS5 scored itself, a negative score among them
        rows = rng.choice(n, 20, replace=False)
        lists.append(fts_postings(ids, [(int(ids[r]), float(rng.normal(2, 2))) for r in rows]))
    allowed = None if seed % 2 else np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)
    full = reference(ids, lists, allowed)
    for k in (1, 5, 10, 50, 3):
        assert RankedMatches(ids, lists, allowed).top(k) == full.top(k)
    for k in (n // 4, n + 10):  # more than the blocks: every match sorted, as KeywordHits sorts them
        assert RankedMatches(ids, lists, allowed).top(k) == full.top(k)
    assert sorted_rows and max(sorted_rows) < len(full.ids)  # the bound left rows out
    some = [*rng.choice(ids, 300).tolist(), 7]
    matches = RankedMatches(ids, lists, allowed)
    assert matches.scores_of(some) == full.scores_of(some)  # looked up in each list
    matches.top(10)
    assert matches._every is not None
    assert matches.scores_of(some) == full.scores_of(some)  # read from every row's sum


def test_an_exhausted_list_answers_deeper_asks_and_nothing_matches_nothing() -> None:
    ids = np.arange(10, dtype=np.int64) * 3
    one = Postings.of(np.array([2, 5], dtype=np.int32), np.array([1.0, 2.0], dtype=np.float32))
    matches = RankedMatches(ids, [one], None)
    assert matches.top(1) == [(15, 2.0)]
    assert matches.top(50) == [(15, 2.0), (6, 1.0)]
    assert matches.top(100) == [(15, 2.0), (6, 1.0)]
    assert RankedMatches(ids, [], None).top(5) == []
    assert RankedMatches(ids, [one], np.array([0, 1], dtype=np.int64)).top(5) == []


@pytest.mark.parametrize(
    "blobs",
    [
        (np.array([0, 9], "<i4").tobytes(), np.array([1.0], "<f4").tobytes()),  # unequal lengths
        (np.array([0, 10], "<i4").tobytes(), np.array([1.0, 1.0], "<f4").tobytes()),  # past the end
        (np.array([-1, 3], "<i4").tobytes(), np.array([1.0, 1.0], "<f4").tobytes()),
        (np.array([5, 3], "<i4").tobytes(), np.array([1.0, 1.0], "<f4").tobytes()),  # not ascending
        (np.array([1, 3, 3], "<i4").tobytes(), np.array([1.0, 1.0, 1.0], "<f4").tobytes()),  # a row twice
    ],
)
def test_postings_that_do_not_fit_the_chunks_are_refused(blobs: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError, match="keyword postings"):
        postings_of(blobs, 10)


@pytest.mark.parametrize("best", ["past the last whole block", "in a block", "tied across blocks"])
def test_adding_everything_up_finds_the_best_rows_wherever_they_are(best: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "BOUND_ROWS", 4)
    monkeypatch.setattr(postings_module, "HOT_BLOCKS_MIN_ROWS", 0)  # looked for in the blocks that reach the bound
    n = 4 * 30 + 3  # 30 whole blocks and 3 rows past them
    ids = np.arange(n, dtype=np.int64) * 3 + 1
    rng = np.random.default_rng(11)
    common = Postings.of(np.arange(n, dtype=np.int32), rng.choice([0.5, 1.0], n).astype(np.float32))
    top = {"past the last whole block": [n - 1, n - 3], "in a block": [41, 42], "tied across blocks": [3, 4, 77]}[best]
    rare = Postings.of(np.array(top, dtype=np.int32), np.full(len(top), 5.0, np.float32))
    lists = [common, rare]
    for k in (1, 2, 3, 5):
        got = RankedMatches(ids, lists, None).top(k)
        assert got == reference(ids, lists, None).top(k)
        assert {i for i, _ in got[: min(k, len(top))]} <= {int(ids[r]) for r in top}


def test_the_cache_keeps_long_lists_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "CACHE_MIN_ROWS", 10)
    short = Postings.of(np.arange(5, dtype=np.int32), np.ones(5, np.float32))
    long = [Postings.of(np.arange(12, dtype=np.int32), np.ones(12, np.float32)) for _ in range(3)]
    # A dataset block-max searches; room for two long lists, their cells included.
    cache = PostingsCache(postings_module.BLOCKMAX_MIN_CHUNKS, budget=2 * long[0].nbytes + 4)
    cache.put("short", short)
    for i, p in enumerate(long):
        cache.put(f"t{i}", p)
    assert cache.get("short") is None  # short lists are cheaper to read again
    assert cache.get("t0") is None  # the least recently used went first
    assert cache.get("t1") is long[1] and cache.get("t2") is long[2]


def test_the_cache_counts_cells_only_on_datasets_blockmax_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "CACHE_MIN_ROWS", 10)
    long = [Postings.of(np.arange(0, 48, 4, dtype=np.int32), np.ones(12, np.float32)) for _ in range(2)]
    budget = 2 * long[0].list_nbytes  # two lists' rows and impacts, not their cells as well
    assert long[0].nbytes > long[0].list_nbytes
    smaller = PostingsCache(100, budget=budget)  # never searched by block-max: no cells to count
    for i, p in enumerate(long):
        smaller.put(f"t{i}", p)
    assert smaller.get("t0") is long[0] and smaller.get("t1") is long[1]
    assert smaller.nbytes == budget
    monkeypatch.setattr(postings_module, "BLOCKMAX_MIN_CHUNKS", 100)  # the same size, searched by block-max
    larger = PostingsCache(100, budget=budget)
    for i, p in enumerate(long):
        larger.put(f"t{i}", p)
    assert larger.get("t0") is None and larger.get("t1") is long[1]
    assert larger.nbytes == long[1].nbytes <= budget


@pytest.mark.parametrize("dense", [0.0, 2.0])  # a bound for every cell, or for those holding the term
def test_cells_hold_each_cells_highest_impact_and_its_postings(dense: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blockmax, "DENSE_CELLS", dense)
    rng = np.random.default_rng(0)
    rows = np.flatnonzero(rng.random(5000) < 0.02).astype(np.int32)
    impacts = rng.random(len(rows)).astype(np.float32)
    cells = blockmax.Cells.of(rows, impacts, shift=4)
    assert (cells.ids is None) == (dense == 0.0)
    if cells.ids is None:  # each cell's first posting: where its first row would go in the list
        span = int(rows[-1] >> 4) + 1
        assert np.array_equal(cells.starts, np.searchsorted(rows, np.arange(span + 1) << 4))
    everywhere = np.arange(5000 >> 4, dtype=np.int64)
    bound = np.zeros(len(everywhere))
    cells.add_bounds(bound)
    for cell in everywhere.tolist():
        inside = (rows >> 4) == cell
        assert bound[cell] == (impacts[inside].max() if inside.any() else 0.0)
        assert np.array_equal(rows[cells.postings_in(np.array([cell]))], rows[inside])
    some = np.sort(rng.choice(everywhere, 40, replace=False))
    assert np.array_equal(rows[cells.postings_in(some)], rows[np.isin(rows >> 4, some)])
    empty = blockmax.Cells.of(np.zeros(0, np.int32), np.zeros(0, np.float32))
    assert len(empty.postings_in(some)) == 0 and empty.nbytes > 0


def scored_cells(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many cells each batch of block_top scored (the scoring itself unchanged)."""
    seen: list[int] = []
    score = blockmax._score_cells

    def counting(cells, *args):  # type: ignore[no-untyped-def]
        seen.append(len(cells))
        return score(cells, *args)

    monkeypatch.setattr(blockmax, "_score_cells", counting)
    return seen


def test_blockmax_scores_only_the_cells_whose_bound_reaches_the_kth_score(monkeypatch: pytest.MonkeyPatch) -> None:
    force_blockmax(monkeypatch)
    monkeypatch.setattr(blockmax, "FIRST_CELLS", 1)
    monkeypatch.setattr(blockmax, "CELL_SHIFT", 6)  # cells of 64 rows
    n = 64 * 100  # 100 cells of 64 rows
    ids = np.arange(n, dtype=np.int64) * 7
    common = Postings.of(np.arange(n, dtype=np.int32), np.full(n, 0.5, np.float32))  # in every chunk
    rare = Postings.of(np.array([200, 201, 5000], dtype=np.int32), np.array([3.0, 2.0, 1.0], np.float32))
    seen = scored_cells(monkeypatch)
    matches = RankedMatches(ids, [common, rare], None)
    reference_top = reference(ids, [common, rare], None).top(2)
    assert matches.top(2) == reference_top == [(200 * 7, 3.5), (201 * 7, 2.5)]
    assert sum(seen) == 1  # cell 3 alone: every other cell's bound (1.5 at most) is below 2.5

    # A filter that leaves the rare chunks out: the cells it empties are never scored.
    allowed = np.arange(64 * 90, n, dtype=np.int64)
    seen.clear()
    filtered = RankedMatches(ids, [common, rare], allowed)
    assert filtered.top(3) == reference(ids, [common, rare], allowed).top(3)
    assert sum(seen) == 10


def test_blockmax_ties_across_cells_go_to_the_lower_id(monkeypatch: pytest.MonkeyPatch) -> None:
    force_blockmax(monkeypatch)
    monkeypatch.setattr(blockmax, "FIRST_CELLS", 1)
    monkeypatch.setattr(blockmax, "CELL_SHIFT", 6)
    n = 64 * 10
    ids = np.arange(n, dtype=np.int64)
    # Cell 9's bound is higher (its other chunk holds the rare term), so it is scored first; cell 0's
    # chunk ties its best and has the lower id.
    a = Postings.of(np.array([3, 600], dtype=np.int32), np.array([2.0, 2.0], np.float32))
    b = Postings.of(np.array([601], dtype=np.int32), np.array([1.5], np.float32))
    seen = scored_cells(monkeypatch)
    assert RankedMatches(ids, [a, b], None).top(1) == [(3, 2.0)]
    assert sum(seen) == 2


def test_postings_on_different_grids_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    force_blockmax(monkeypatch)
    rows, impacts = np.arange(10, dtype=np.int32), np.ones(10, np.float32)
    a = Postings(rows, impacts, 1.0, blockmax.Cells.of(rows, impacts, shift=2))
    b = Postings(rows, impacts, 1.0, blockmax.Cells.of(rows, impacts, shift=3))
    with pytest.raises(ValueError, match="different grids"):
        RankedMatches(np.arange(10, dtype=np.int64), [a, b], None).top(3)


@pytest.mark.parametrize("pieces", [2, 3, 8])
@pytest.mark.parametrize("seed", range(4))
def test_a_count_in_pieces_gives_every_sum_to_the_bit(pieces: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "SHARED_COUNT_POSTINGS", 1)  # every count in pieces
    monkeypatch.setattr(postings_module, "COUNT_PIECES", pieces)
    monkeypatch.setattr(postings_module, "BOUND_ROWS", [4, 16][seed % 2])  # pieces of whole blocks, the last short
    counted: list[int] = []
    real = meanwhile.shared

    def watched(piece, parts):  # type: ignore[no-untyped-def]
        counted.append(parts)
        return real(piece, parts)

    monkeypatch.setattr(postings_module, "shared", watched)
    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(pieces * 16 + 1, 6000))
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = random_lists(rng, n, int(rng.integers(2, 6)))
    if seed % 2 == 0:  # a phrase FTS5 scored itself, a negative score among them
        rows = rng.choice(n, 20, replace=False)
        lists.append(fts_postings(ids, [(int(ids[r]), float(rng.normal(2, 2))) for r in rows]))
    allowed = None if seed < 2 else np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)
    full = reference(ids, lists, allowed)
    matches = RankedMatches(ids, lists, allowed)

    for k in (1, 10, 50, n + 10):
        assert matches.top(k) == full.top(k)
    some = [*rng.choice(ids, 300).tolist(), 7]
    assert matches.scores_of(some) == full.scores_of(some)
    assert np.array_equal(matches.ids, full.ids)
    assert np.array_equal(matches.scores, full.scores)
    assert counted == [pieces]  # counted once, in that many pieces
    bound = postings_module.BOUND_ROWS  # each piece's block maxima: every whole block's, the tail left out
    every = matches._every
    assert every is not None and matches._tops is not None
    blocks = n // bound
    assert np.array_equal(matches._tops, every[: blocks * bound].reshape(blocks, bound).max(axis=1))


def test_a_small_count_is_one_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    shared: list[int] = []
    monkeypatch.setattr(postings_module, "shared", lambda piece, parts: shared.append(parts))
    rng = np.random.default_rng(5)
    ids = np.arange(3000, dtype=np.int64)
    lists = random_lists(rng, 3000, 4)
    assert RankedMatches(ids, lists, None).top(10) == reference(ids, lists, None).top(10)
    assert shared == []


def test_a_small_datasets_short_lists_are_kept_and_a_large_ones_are_not() -> None:
    rows = Postings.of(np.arange(100, dtype=np.int32), np.ones(100, np.float32))  # 100 rows
    small = PostingsCache(3_000)  # every list short: from 1/256 of its chunks kept (11 rows)
    small.put("term", rows)
    assert small.get("term") is rows
    tiny = Postings.of(np.arange(5, dtype=np.int32), np.ones(5, np.float32))
    small.put("rare", tiny)
    assert small.get("rare") is None
    large = PostingsCache(1_000_000)  # 100 rows there cost less to read again than to keep
    large.put("term", rows)
    assert large.get("term") is None
