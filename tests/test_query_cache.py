"""Repeated queries' vectors are remembered (embedding/cache.py): the same answers with and without
the cache, keyed by model fingerprint and exact text, bounded, and never changed by a caller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder

from mcpower.embedding.cache import CachedQueries, QueryCache
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import search

QUERIES = ["install the zephyrine package", "quokka flags", "marmalade", "Install the zephyrine package"]


def answers(registry: Registry) -> list[list[tuple[str, float]]]:
    """Every query in hybrid (with and without a filter) and semantic mode, each asked twice."""
    out = []
    for _ in range(2):
        for q in QUERIES:
            for mode, filters in (("hybrid", None), ("hybrid", SearchFilters(folder="guide")), ("semantic", None)):
                r = search(registry, q, "docs", 5, mode, filters=filters)
                out.append([(x.result_id, x.score) for x in r.results])
    return out


def test_the_same_results_with_and_without_the_cache(
    corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    plain = Registry(datasets_dir, allowed_models=[FakeEmbedder.model_name], query_cache=0)
    before = len(fake_embedder.queries)
    without = answers(plain)
    embedded_without = len(fake_embedder.queries) - before
    cached = Registry(datasets_dir, allowed_models=[FakeEmbedder.model_name])
    before = len(fake_embedder.queries)
    with_cache = answers(cached)
    embedded_with = len(fake_embedder.queries) - before
    plain.close()
    cached.close()

    assert with_cache == without
    assert any(with_cache)
    # Each distinct text is embedded once (case matters: "Install ..." is another query).
    assert embedded_with == len(QUERIES)
    assert embedded_without > embedded_with


def test_keyed_by_fingerprint_and_exact_text() -> None:
    cache = QueryCache(8)
    a, b = FakeEmbedder(), FakeEmbedder()
    b.model_fingerprint = "other-weights"
    b._vector = lambda text: np.full(b.dimension, 1 / np.sqrt(b.dimension), dtype=np.float32)  # type: ignore[method-assign]
    ca, cb = CachedQueries(a, cache), CachedQueries(b, cache)

    va = ca.embed_query("zephyrine")
    vb = cb.embed_query("zephyrine")
    assert not np.allclose(va, vb)  # the same text under other weights is not the cached vector
    assert np.array_equal(ca.embed_query("zephyrine"), va)
    assert np.array_equal(cb.embed_query("zephyrine"), vb)
    ca.embed_query("zephyrine ")  # another text, however close
    assert a.queries == ["zephyrine", "zephyrine "]
    assert b.queries == ["zephyrine"]
    assert (cache.hits, cache.misses) == (2, 3)


def test_bounded_least_recently_used_first() -> None:
    fake = FakeEmbedder()
    cached = CachedQueries(fake, QueryCache(2))
    for q in ("one", "two", "one", "three", "one", "two"):
        cached.embed_query(q)
    assert len(cached.cache) == 2
    # "two" was the least recently used when "three" came, so it is embedded again; "one" never is.
    assert fake.queries == ["one", "two", "three", "two"]


def test_a_vector_handed_out_cannot_be_changed() -> None:
    cached = CachedQueries(FakeEmbedder(), QueryCache(4))
    v = cached.embed_query("zephyrine")
    with pytest.raises(ValueError, match="read-only"):
        v *= 2
    assert np.isclose(float(np.linalg.norm(cached.embed_query("zephyrine"))), 1.0)


class _Prompted(FakeEmbedder):
    """A fake that puts its query prompt before each query, as the real backends do."""

    def embed_query(self, text: str) -> np.ndarray:
        return super().embed_query(self.query_prompt + text)


def test_a_dataset_with_a_query_prompt_gets_its_own_vectors() -> None:
    from mcpower.embedding import with_prompts

    fake = _Prompted()
    cached = CachedQueries(fake, QueryCache(8))
    prompted = with_prompts(cached, "query: ", "passage: ")  # what the registry hands an e5 dataset

    plain_vector = cached.embed_query("zephyrine")
    prompted_vector = prompted.embed_query("zephyrine")
    prompted.embed_query("zephyrine")

    assert fake.queries == ["zephyrine", "query: zephyrine"]  # the prompt reached the model, once
    assert not np.allclose(plain_vector, prompted_vector)
    assert prompted.document_prompt == "passage: "
