"""Keyword matches scored on demand (store/local/postings.py): MaxScore's top k and the scores of
given chunks equal scoring every match (keyword.combine), to the bit, ties and filters included."""

from __future__ import annotations

import numpy as np
import pytest

from mcpower.store.local import postings as postings_module
from mcpower.store.local.keyword import combine
from mcpower.store.local.postings import Postings, PostingsCache, RankedMatches, fts_postings, postings_of


def random_lists(rng: np.random.Generator, n: int, terms: int) -> list[Postings]:
    """Terms of very different lengths (a rare one, common ones) with BM25-like impacts; some
    impacts repeat, so equal scores happen."""
    out = []
    for t in range(terms):
        share = rng.choice([0.002, 0.02, 0.2, 0.6])
        rows = np.flatnonzero(rng.random(n) < share).astype(np.int32)
        idf = rng.uniform(0.01, 8.0) if share < 0.5 else 1e-6
        impacts = (idf * rng.choice([0.5, 1.0, 1.5, 2.0], len(rows))).astype(np.float32)
        out.append(Postings.of(rows, impacts, n if t % 2 == 0 else 0))  # common terms dense, or not
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


@pytest.mark.parametrize("seed", range(12))
def test_maxscore_top_k_and_scores_equal_scoring_every_match(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 5000))
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = random_lists(rng, n, int(rng.integers(1, 7)))
    if seed % 3 == 0:  # a phrase FTS5 scored itself, a negative score among them
        rows = rng.choice(n, 20, replace=False)
        lists.append(fts_postings(ids, [(int(ids[r]), float(rng.normal(2, 2))) for r in rows]))
    allowed = None if seed % 2 else np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)
    if seed % 4 == 1:  # the walk never falls back to adding everything up
        monkeypatch.setattr(postings_module, "FULL_SCAN_SHARE", 10.0)
    full = reference(ids, lists, allowed)
    matches = RankedMatches(ids, lists, allowed)

    for k in (1, 5, 10, 50, 3, n + 10):
        assert matches.top(k) == full.top(k)
    some = [*rng.choice(ids, 200).tolist(), 7, 8]  # ids that are no chunk are absent too
    assert matches.scores_of(some) == full.scores_of(some)
    assert np.array_equal(matches.ids, full.ids)
    assert np.array_equal(matches.scores, full.scores)


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
    ],
)
def test_postings_that_do_not_fit_the_chunks_are_refused(blobs: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError, match="keyword postings"):
        postings_of(blobs, 10)


def test_the_cache_keeps_long_lists_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "CACHE_MIN_ROWS", 10)
    cache = PostingsCache(budget=8 * 25)  # 25 rows of (int32, float32)
    short = Postings.of(np.arange(5, dtype=np.int32), np.ones(5, np.float32))
    long = [Postings.of(np.arange(12, dtype=np.int32), np.ones(12, np.float32)) for _ in range(3)]
    cache.put("short", short)
    for i, p in enumerate(long):
        cache.put(f"t{i}", p)
    assert cache.get("short") is None  # short lists are cheaper to read again
    assert cache.get("t0") is None  # the least recently used went first
    assert cache.get("t1") is long[1] and cache.get("t2") is long[2]
