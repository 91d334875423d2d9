"""Search over the datasets of a registry — hybrid, semantic or keyword. Works over any store
through the Store interface; the lookups behind a result id (get_source, get_metadata) are in
lookups.py, and importable from here as before.

A search of one dataset takes candidates from both sides (vector and keyword), scores every
candidate on both, fuses the scores (ranking.py) and cuts the top k; filters apply inside both
candidate lists, before the top k. Ranked chunks are then grouped into passages
(passages.py) before the top k is cut, so a result is one place, not one of its overlapping chunks.
A search of every dataset merges their results by a score calibrated per dataset (ranking.py).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from mcpower.analysis import query_languages, snippet_terms
from mcpower.coverage import cosine_scale, semantic_weights
from mcpower.defaults import DEFAULT_TOP_K
from mcpower.defaults import MAX_OFFSET as MAX_OFFSET  # importable from here, as before
from mcpower.errors import (
    DatasetUnavailableError,
    EmbeddingModelError,
    InvalidQueryError,
)
from mcpower.lookups import SCOPES as SCOPES
from mcpower.lookups import get_metadata as get_metadata
from mcpower.lookups import get_source as get_source
from mcpower.lookups import make_result_id, pages_of
from mcpower.lookups import parse_result_id as parse_result_id
from mcpower.lookups import resolve as resolve
from mcpower.lookups import utc_now_iso as utc_now_iso
from mcpower.meanwhile import both
from mcpower.passages import Passage, best_passages, validate_grouping
from mcpower.priors import apply_priors
from mcpower.ranking import (
    CANDIDATE_FACTOR,
    MIN_CANDIDATES,
    SEMANTIC_WEIGHT,
    across_datasets,
    best_snippet,
    fuse,
    is_low_confidence,
    validate_mode,
    validate_query,
    validate_top_k,
)
from mcpower.registry import Registry
from mcpower.results import (
    MAX_HEADING_CHARS,
    MAX_SNIPPET_CHARS,
    Lines,
    Mode,
    SearchFilters,
    SearchMeta,
    SearchResponse,
    SearchResult,
    clip_chars,
    estimate_tokens,
    fit_results,
)
from mcpower.results import MIN_SNIPPET_CHARS as MIN_SNIPPET_CHARS  # importable from here, as before
from mcpower.sources.citation import url_of
from mcpower.store import ChunkHit, KeywordMatches, Store
from mcpower.terms import query_terms

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from mcpower.manifest import DatasetInfo


def search(
    registry: Registry,
    query: str,
    dataset: str | None = None,
    top_k: int | None = None,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
    min_score: float = 0.0,
    snippet_chars: int = MAX_SNIPPET_CHARS,
    max_bytes: int | None = None,
    max_tokens: int | None = None,
    offset: int | None = None,
    priors: bool = True,
    group: str = "passages",
    per_document: int | None = None,
) -> SearchResponse:
    """Search one dataset, or every ready dataset when ``dataset`` is None, and merge.

    Filters apply inside each candidate list, before the top k is taken. ``offset`` skips that many
    results; when it or ``max_tokens`` is given, ``meta.next_offset`` says where the next page starts
    (a plain search answers as it did before pages existed). With ``max_bytes`` (the results as JSON)
    or ``max_tokens`` (the whole response, estimated by results.estimate_tokens), the answer is made
    to fit: snippets shortened first, then results left out (one result always stays), and
    ``meta.truncated`` says so. ``group`` "passages" merges adjacent chunks of a document into one
    result and ``per_document`` caps the results of one document (passages.py); "none" returns raw
    chunks. Pages and budgets count grouped results. With ``priors`` (the default), change notes rank
    below the pages that document a feature, unless the question is about versions or changes
    (priors.py).

    Raises:
        InvalidQueryError, InvalidTopKError, DatasetNotFoundError, DatasetUnavailableError,
        EmbeddingModelError.
    """
    started = time.perf_counter()
    q = validate_query(query)
    m = validate_mode(mode)
    if top_k is not None:
        validate_top_k(top_k)
    if not 0.0 <= min_score <= 1.0:
        raise InvalidQueryError(f"min_score must be between 0 and 1, got {min_score}")
    paging = offset is not None or max_tokens is not None
    offset = 0 if offset is None else offset
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise InvalidQueryError(f"offset must be a whole number from 0 to {MAX_OFFSET}, got {str(offset)[:20]}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise InvalidQueryError(f"max_tokens must be a positive whole number, got {str(max_tokens)[:20]}")
    grouping = validate_grouping(group, per_document)
    if m != "keyword":
        registry.prefetch_embedder(dataset)
    notes: list[str] = []
    if dataset is not None:
        stores = [registry.store(dataset)]
    else:
        stores, failed = [], []
        entries = registry.scan()  # pick up datasets ingested (or broken) since the last look
        broken = sum(1 for e in entries if e.status == "error")
        for i in registry.ready_ids():
            try:  # one corrupt dataset, or one whose model cannot be used, must not break the others
                store = registry.store(i)
                if m != "keyword":
                    registry.embedder_for(store.info)
                stores.append(store)
            except (DatasetUnavailableError, EmbeddingModelError) as e:
                failed.append(e)
                notes.append(f"dataset {i!r} skipped ({e.code}): {e.message}")
        if failed and not stores:
            raise failed[0]
        if broken:
            notes.append(f"{broken} dataset(s) could not be loaded (see knowledge_list_datasets / `mcpower validate`)")
        if not entries:
            notes.append(registry.none_here())
    k = top_k or (
        stores[0].info.default_top_k
        if len(stores) == 1
        else max((s.info.default_top_k for s in stores), default=DEFAULT_TOP_K)
    )
    depth = offset + k + 1 if paging else k  # one more tells whether there is a next page
    lists: list[list[tuple[float, str, int, Passage]]] = []
    terms = {s.info.id: _snippet_terms(q, s.info) for s in stores}
    searched: list[Store] = []
    for store in stores:
        # Equal scores keep their store's order (by chunk id; by raw cosine for semantic scores clipped to 0).
        rank_at = partial(_search_store, registry, store, q, mode=m, filters=filters, sides=_Sides(), priors=priors)
        try:
            passages = best_passages(rank_at, depth, MIN_CANDIDATES, grouping)
        except DatasetUnavailableError as e:  # damage the checks at loading did not reach (store/local/pool.py)
            if dataset is not None or (not searched and store is stores[-1]):
                raise
            notes.append(f"dataset {store.info.id!r} skipped ({e.code}): {e.message}")
            continue
        searched.append(store)
        best = passages[0].score if passages else 0.0
        keys = [p.score if len(stores) == 1 else across_datasets(m, p.score, best) for p in passages]
        lists.append([(key, store.info.id, rank, p) for rank, (key, p) in enumerate(zip(keys, passages))])
    # Across datasets by scores made comparable (ranking.py); each dataset's list keeps its own order,
    # which spreading (passages.py) makes other than by score below its first results.
    merged = list(heapq.merge(*lists, key=lambda t: (-t[0], t[1], t[2])))
    ranked = [(store_id, p) for _, store_id, _, p in merged if p.score >= min_score]
    sources = {s.info.id: s.info.source for s in stores}
    unread = _read_texts(searched, ranked[offset : offset + k], notes, alone=dataset is not None)
    picked = [
        (
            store_id,
            p,
            registry.freshness.why(sources[store_id], p.best.path, p.best.size, p.best.mtime),
            url_of(sources[store_id], p.best.path),
        )
        for store_id, p in ranked[offset : offset + k]
        if store_id not in unread
    ]
    meta = SearchMeta(
        datasets=[s.info.id for s in searched],
        mode=m,
        limit=k,
        count=0,
        duration_ms=0.0,
        low_confidence=is_low_confidence(m, max((p.score for *_, p in merged), default=None)),
        min_score=min_score,
        notes=notes,
        offset=offset if paging else None,
        next_offset=offset + len(picked) if len(ranked) > offset + len(picked) and paging else None,
    )
    results, cut = fit_results(
        lambda chars: [_result(store_id, p, terms[store_id], chars, stale, url) for store_id, p, stale, url in picked],
        snippet_chars,
        max_bytes,
        max_tokens,
        meta,
    )
    if cut:
        meta.truncated = True
        meta.next_offset = offset + len(results)
    elif max_tokens is not None:
        meta.truncated = False
    meta.count = len(results)
    response = SearchResponse(status="ok" if results else "empty", results=results, meta=meta)
    response.meta.duration_ms = round((time.perf_counter() - started) * 1000, 2)
    if max_tokens is not None:
        for _ in range(2):  # the count is part of what it counts
            response.meta.estimated_tokens = estimate_tokens(response.model_dump_json())
    return response


def rank_paths(
    registry: Registry, query: str, dataset: str, depth: int, mode: str = "hybrid", priors: bool = True
) -> list[str]:
    """Document paths of the best ``depth`` chunks, best first; for evaluation (no 100 cap, no snippets)."""
    store = registry.store(dataset)
    ranked = _search_store(registry, store, validate_query(query), depth, validate_mode(mode), None, priors=priors)
    return [hit.path for hit, _ in ranked]


@dataclass
class _Sides:
    """What one store's search computes once per query, however deep grouping ranks (passages.py)."""

    matches: KeywordMatches | None = None
    qvec: NDArray[np.float32] | None = None
    fused: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # by candidates per side
    hits: dict[int, ChunkHit] = field(default_factory=dict)
    vectors: dict[int, NDArray[np.float32]] = field(default_factory=dict)  # candidates' stored vectors


def _search_store(
    registry: Registry,
    store: Store,
    q: str,
    k: int,
    mode: Mode,
    filters: SearchFilters | None,
    candidates: int | None = None,  # per side; by default CANDIDATE_FACTOR k, at least MIN_CANDIDATES
    sides: _Sides | None = None,
    priors: bool = True,
) -> list[tuple[ChunkHit, float]]:
    sides = sides if sides is not None else _Sides()
    depth = candidates or max(k * CANDIDATE_FACTOR, MIN_CANDIDATES)
    where = filters if filters is not None and filters.active else None
    if depth in sides.fused:  # deeper into candidates already scored: no new search
        return _hits(store, sides, sides.fused[depth], q, k, priors)
    cosines: dict[int, float] = {}
    # One keyword pass scores every match: the top `depth` are the keyword candidates, and the
    # rest answer the BM25 of the semantic candidates.
    nearest: list[tuple[int, float]] | None = None
    if mode == "hybrid" and sides.matches is None and sides.qvec is None:
        # Neither side needs the other before fusion: the query is embedded and its vector searched
        # while the keyword side runs (meanwhile.py).
        (sides.matches, top), (sides.qvec, nearest) = both(
            partial(_keyword, store, q, where, depth, sides), partial(_semantic, registry, store, q, where, depth)
        )
    else:
        if sides.matches is None and mode != "semantic":
            sides.matches = store.keyword(q, where)
        top = sides.matches.top(depth) if sides.matches is not None else []
    matches = sides.matches
    bm25s = dict(top)
    if mode != "keyword":
        if sides.qvec is None:
            sides.qvec = registry.embedder_for(store.info).embed_query(q)
        qvec = sides.qvec
        cosines = dict(nearest if nearest is not None else store.semantic(qvec, depth, where))
        if matches is not None:
            # Score every candidate on both sides, so fusion never guesses a missing score.
            missing = [i for i in bm25s if i not in cosines]
            unread = [i for i in missing if i not in sides.vectors]
            if unread:
                sides.vectors.update(zip(unread, store.vectors(unread)))
            if missing:
                import numpy as np  # loaded already, by the store

                vecs = np.stack([sides.vectors[i] for i in missing])
                cosines.update(zip(missing, (vecs @ qvec).tolist()))
            bm25s.update(matches.scores_of(cosines))
    weights = _semantic_weights(store, sides, q, list(cosines.keys() | bm25s.keys())) if mode == "hybrid" else None
    scale = cosine_scale(store.info.embedding.model)
    ranked = sides.fused[depth] = fuse(mode, cosines, bm25s, weights, scale)
    return _hits(store, sides, ranked, q, k, priors)


def _keyword(
    store: Store, q: str, where: SearchFilters | None, depth: int, sides: _Sides
) -> tuple[KeywordMatches, list[tuple[int, float]]]:
    """The keyword side's matches, and their top ``depth``; run while the query is embedded, so it
    also reads what fusion and ranking will ask of those candidates (into ``sides``): their vectors
    (the ones the vector side does not find are scored with them) and their places."""
    matches = store.keyword(q, where)
    top = matches.top(depth)
    ids = [i for i, _ in top]
    if ids:
        sides.vectors.update(zip(ids, store.vectors(ids)))
        sides.hits.update(store.chunks(ids, text=False))
    return matches, top


def _semantic(
    registry: Registry, store: Store, q: str, where: SearchFilters | None, depth: int
) -> tuple[NDArray[np.float32], list[tuple[int, float]]]:
    """The query's vector, and its ``depth`` nearest chunks (id, cosine)."""
    qvec = registry.embedder_for(store.info).embed_query(q)
    return qvec, store.semantic(qvec, depth, where)


def _semantic_weights(store: Store, sides: _Sides, q: str, ids: list[int]) -> dict[int, float] | None:
    """Each candidate's semantic weight where the model does not read its language (coverage.py);
    candidates' languages come from their chunks, fetched once per query with the hits."""

    def languages_of(wanted: Sequence[int]) -> dict[int, str]:
        sides.hits.update(store.chunks([i for i in wanted if i not in sides.hits], text=False))
        return {i: sides.hits[i].language for i in wanted if i in sides.hits}

    e = store.info.embedding
    return semantic_weights(
        e.model, e.languages, store.info.counts.languages, q, ids, languages_of, SEMANTIC_WEIGHT, _query_language
    )


def _query_language(q: str) -> str:
    """The question's language ('und' when too short to tell); loads the language model on first use."""
    from mcpower.analysis import detect

    return detect(q).language


def _hits(
    store: Store, sides: _Sides, ranked: list[tuple[int, float]], q: str, k: int, priors: bool
) -> list[tuple[ChunkHit, float]]:
    """The best ``k`` of ``ranked`` as chunks, change notes below the pages that document a feature
    (priors.py); chunks fetched once per query, ids a damaged index invented dropped."""

    def fetch(ids: list[int]) -> dict[int, ChunkHit]:
        sides.hits.update(store.chunks([i for i in ids if i not in sides.hits], text=False))
        return {i: sides.hits[i] for i in ids if i in sides.hits}

    return apply_priors(ranked, fetch, q, k, priors)


def _read_texts(stores: list[Store], results: list[tuple[str, Passage]], notes: list[str], alone: bool) -> set[str]:
    """The text of each result's best chunk, read now: candidates were ranked and grouped by place,
    without their text (Store.chunks), so only the few results' texts are read. The datasets whose
    texts could not be read (damage found now, in a search of every dataset: their results are left
    out, with a note; searched ``alone``, the error is raised)."""
    failed: set[str] = set()
    for store in stores:
        mine = [p for store_id, p in results if store_id == store.info.id and not p.best.text]
        try:
            full = store.chunks([p.best.id for p in mine]) if mine else {}
        except DatasetUnavailableError as e:
            if alone:
                raise
            failed.add(store.info.id)
            notes.append(f"dataset {store.info.id!r} skipped ({e.code}): {e.message}")
            continue
        for p in mine:
            hit = full.get(p.best.id)
            if hit is not None:  # else a chunk gone since (a damaged index): its text stays empty
                p.chunks[p.chunks.index(p.best)] = p.best = hit
    return failed


def _snippet_terms(query: str, info: DatasetInfo) -> list[str]:
    """What marks a chunk as matching ``query`` in the dataset ``info`` describes: as its keyword
    index analyses text (mcpower.analysis), or FTS5's words for a dataset indexed before that."""
    if info.analysis is not None and info.analysis.scheme is not None:
        return snippet_terms(query, query_languages(info.counts.languages, info.analysis.undetermined))
    return query_terms(query)


def _result(
    dataset: str, p: Passage, terms: list[str], snippet_chars: int, stale: str, url: str | None = None
) -> SearchResult:
    hit = p.best  # names, scores and shows the passage: get_source and get_metadata take its id
    return SearchResult(
        result_id=make_result_id(dataset, hit.id),
        score=round(min(max(p.score, 0.0), 1.0), 4),
        title=hit.title,
        path=hit.path,
        snippet=best_snippet(hit.text, terms, snippet_chars),
        file_type=hit.file_type,
        heading_path=clip_chars(hit.heading_path, MAX_HEADING_CHARS),
        lines=Lines(start=p.start_line, end=p.end_line),
        dataset=dataset,
        pages=pages_of(p.chunks),
        indexed_at=hit.indexed_at,
        stale=bool(stale),
        stale_reason=stale or None,
        url=url,
    )
