"""Scores, fusion and snippets: turning candidate lists into ranked, explained results.

Scores are absolute, not rescaled per query, so an off-topic question scores low in every mode:

    semantic  cosine similarity of query and chunk on the model's scale (coverage.cosine_scale), clipped to 0..1
    keyword   BM25 squashed to 0..1 as bm25 / (bm25 + KEYWORD_HALF): a score of 0.5 means BM25 = KEYWORD_HALF
    hybrid    w * semantic + (1 - w) * keyword, both computed for every candidate of either list (a
              chunk missing from the keyword list scores 0 there); w is SEMANTIC_WEIGHT, less where
              the model does not read the chunk's language or the question's script (coverage.py)

docs/search.md explains the choice; benchmarks/ measures it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mcpower.defaults import MAX_TOP_K as MAX_TOP_K
from mcpower.errors import InvalidQueryError, InvalidTopKError
from mcpower.results import MODES, Mode, replace_surrogates

MAX_QUERY_CHARS = 1024
# BM25 at which the keyword score is 0.5, and the weight of the semantic score in hybrid mode:
# the best pair on both SciFact and Cranfield in benchmarks/fusion_study.py (docs/search.md).
KEYWORD_HALF = 16.0
SEMANTIC_WEIGHT = 0.5
# Below these best scores a result set is flagged low_confidence (benchmarks/confidence_study.py,
# docs/search.md): none of the bench collections' own questions falls below them, while every
# unrelated question does and most questions from the other, near-topic collection do.
LOW_CONFIDENCE = {"semantic": 0.35, "keyword": 0.25, "hybrid": 0.30}
# How many candidates each list contributes before fusion, relative to k.
CANDIDATE_FACTOR = 3
MIN_CANDIDATES = 50


def validate_query(query: str) -> str:
    """The trimmed query, or InvalidQueryError naming the rule it breaks."""
    if not isinstance(query, str):
        raise InvalidQueryError("query must be a string")
    q = replace_surrogates(query.replace("\x00", " ")).strip()
    if not q:
        raise InvalidQueryError("query is empty; type a question or some keywords")
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidQueryError(f"query is {len(q)} characters; the limit is {MAX_QUERY_CHARS}, shorten it")
    return q


def validate_top_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOP_K:
        raise InvalidTopKError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {str(k)[:20]}")
    return k


def validate_mode(mode: str) -> Mode:
    for m in MODES:
        if mode == m:
            return m
    raise InvalidQueryError(f"mode must be one of {', '.join(MODES)}, got {str(mode)[:20]!r}")


def keyword_score(bm25: float) -> float:
    return bm25 / (bm25 + KEYWORD_HALF) if bm25 > 0 else 0.0


def semantic_score(cosine: float, scale: tuple[float, float] = (0.0, 1.0)) -> float:
    """The cosine on the model's scale (coverage.cosine_scale: where its unrelated and its closest
    texts fall), clipped to 0..1; all-MiniLM-L6-v2's is the cosine itself."""
    low, high = scale
    return min(max((cosine - low) / (high - low), 0.0), 1.0)


def fuse(
    mode: Mode,
    cosines: dict[int, float],
    bm25s: dict[int, float],
    weights: Mapping[int, float] | None = None,
    scale: tuple[float, float] = (0.0, 1.0),
) -> list[tuple[int, float]]:
    """Candidates ranked by the mode's score, best first; ties broken by chunk id for stability.

    ``weights``: the semantic weight of each candidate in hybrid mode (coverage.py), else
    SEMANTIC_WEIGHT; ``scale``: the model's cosine scale (coverage.cosine_scale).

    Semantic mode ranks by the cosine itself, so candidates whose cosines are all clipped to a
    score of 0 keep the order of an inner-product search (the original system's, too).
    """
    if mode == "semantic":
        ranked = sorted(cosines.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(i, semantic_score(c, scale)) for i, c in ranked]
    if mode == "keyword":
        scored = {i: keyword_score(b) for i, b in bm25s.items()}
    else:
        ids = cosines.keys() | bm25s.keys()
        w = weights or {}
        scored = {
            i: (s := w.get(i, SEMANTIC_WEIGHT)) * semantic_score(cosines.get(i, 0.0), scale)
            + (1 - s) * keyword_score(bm25s.get(i, 0.0))
            for i in ids
        }
    return sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))


def across_datasets(mode: Mode, score: float, best: float) -> float:
    """The key a result of one dataset ranks by among several datasets' results: the mean of its score
    and its score relative to its dataset's best for the query (that best counted as at least the
    mode's low-confidence line, so a dataset where nothing matches is not lifted).

    Scores of different datasets are not comparable as they stand: BM25 weighs a word by its rarity in
    its own dataset, so a small dataset about the question, where the question's words are common,
    scores below a large one where they are rare. The relative half puts each dataset's best near the
    top; the absolute half keeps the order by score among datasets that match alike. Within a dataset
    the key keeps the order of the scores, and each result keeps its own score (docs/search.md,
    benchmarks/distinct.py).
    """
    return (score + score / max(best, LOW_CONFIDENCE[mode])) / 2


def is_low_confidence(mode: Mode, best: float | None) -> bool:
    return best is None or best < LOW_CONFIDENCE[mode]


_SEGMENT = re.compile(r"[^\n.!?。！？]*(?:[.!?。！？]+|\n|$)")


@dataclass(frozen=True)
class _Segment:
    start: int
    end: int
    hits: int


# A Markdown heading's trailing attribute block: `{ #id }`, `{#id .class}` (MkDocs, Pandoc).
_HEADING_ATTRIBUTES = re.compile(r"^([ \t]{0,3}#{1,6}[ \t].*?)[ \t]*\{[ \t]*[#.][^}\n]*\}[ \t]*$", re.M)


def best_snippet(text: str, terms: list[str], max_chars: int) -> str:
    """The window of ``text`` (≤ max_chars) holding the most query terms, cut at sentence or line ends;
    a heading's MkDocs/Pandoc attribute block (``## Middleware { #advanced-middleware }``) left out."""
    text = text.strip()
    if "{" in text:
        text = _HEADING_ATTRIBUTES.sub(r"\1", text)
    if len(text) <= max_chars:
        return text
    lower = text.lower()
    unique = set(terms)
    segments = [
        _Segment(m.start(), m.end(), sum(1 for t in unique if t in lower[m.start() : m.end()]))
        for m in _SEGMENT.finditer(text)
        if m.end() > m.start()
    ]
    room = max(max_chars - 2, 1)  # the "…" marks on both sides count toward max_chars
    best_hits, best_start, best_end = -1, 0, room
    # The window of segments from i to j slides: j never goes back (one pass, not one per segment:
    # a chunk of 160,000 short lines took 2 s).
    j, window = 0, 0
    for i, seg in enumerate(segments):
        if j < i:
            j, window = i, 0
        while j < len(segments) and segments[j].end - seg.start <= room:
            window += segments[j].hits
            j += 1
        if j > i:  # whole sentences or lines
            hits, start, end = window, seg.start, segments[j - 1].end
            window -= seg.hits
        else:  # one sentence longer than the room: cut it around its first hit
            hits = seg.hits
            at = min(
                (lower.find(t, seg.start, seg.end) for t in unique if t in lower[seg.start : seg.end]),
                default=seg.start,
            )
            start = max(seg.start, min(at - room // 3, seg.end - room))
            end = start + room
        if hits > best_hits:
            best_hits, best_start, best_end = hits, start, end
    prefix = "…" if best_start > 0 else ""
    suffix = "…" if best_end < len(text) else ""
    return (prefix + text[best_start:best_end].strip() + suffix)[:max_chars]
