"""Distinct results: ranked chunks grouped into passages, and a cap on passages per document.

Chunking overlaps consecutive chunks for recall, so the chunks that match a question best are often
neighbours in one document. Returned as they are, they fill a top 5 with one place, repeated. A
search therefore groups its ranked chunks before the top k is cut:

    passages      chunks of one section (document and heading path) that overlap or follow each other
                  (consecutive positions, or line ranges that overlap or touch) are one passage: its
                  lines span them all, and it ranks, scores and is named (result id) by its best
                  chunk, whose text the snippet is taken from; chunks of different sections stay
                  apart, so a result's heading path is always the section it is in
    per document  a document takes at most ``per_document`` passages (or chunks, ungrouped); the
                  others are left out, so the top k covers several places

Grouping walks the ranked list once, best first, so every passage keeps its best chunk's rank: the
order of documents by their best chunk — what `mcpower eval` measures — is the ungrouped order.
docs/search.md explains the choice of default; benchmarks/distinct.py measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from mcpower.defaults import DEFAULT_PER_DOCUMENT, MAX_PER_DOCUMENT
from mcpower.errors import InvalidQueryError
from mcpower.store import ChunkHit

Group = Literal["passages", "none"]
GROUPS: tuple[Group, ...] = ("passages", "none")


@dataclass
class Passage:
    """Adjacent or overlapping ranked chunks of one document, named and scored by the best of them."""

    best: ChunkHit
    score: float
    chunks: list[ChunkHit] = field(default_factory=list)  # best first, then in the order they joined

    @property
    def start_line(self) -> int:
        return min(c.start_line for c in self.chunks)

    @property
    def end_line(self) -> int:
        return max(c.end_line for c in self.chunks)

    @property
    def pages(self) -> tuple[int, int] | None:
        starts = [c.page_start for c in self.chunks if c.page_start is not None]
        ends = [c.page_end for c in self.chunks if c.page_end is not None]
        return (min(starts), max(ends)) if starts and ends else None

    def touches(self, hit: ChunkHit) -> bool:
        """Whether ``hit`` (of the same document) is of the passage's section and follows, precedes or
        overlaps it."""
        ordinals = [c.ordinal for c in self.chunks]
        return hit.heading_path == self.best.heading_path and (
            min(ordinals) - 1 <= hit.ordinal <= max(ordinals) + 1
            or (hit.start_line <= self.end_line + 1 and self.start_line <= hit.end_line + 1)
        )


def validate_grouping(group: str, per_document: int | None) -> tuple[Group, int | None]:
    """The grouping and the per-document cap it implies: DEFAULT_PER_DOCUMENT for passages, none for
    raw chunks, unless ``per_document`` is given.

    Raises:
        InvalidQueryError: an unknown group or a cap that is not a whole number from 1 to MAX_PER_DOCUMENT.
    """
    g = next((x for x in GROUPS if x == group), None)
    if g is None:
        raise InvalidQueryError(f"group must be passages or none, got {str(group)[:20]!r}")
    if per_document is None:
        return g, DEFAULT_PER_DOCUMENT if g == "passages" else None
    if isinstance(per_document, bool) or not isinstance(per_document, int) or not 1 <= per_document <= MAX_PER_DOCUMENT:
        raise InvalidQueryError(
            f"per_document must be a whole number from 1 to {MAX_PER_DOCUMENT}, got {str(per_document)[:20]}"
        )
    return g, per_document


def group_hits(ranked: list[tuple[ChunkHit, float]], group: Group, per_document: int | None) -> list[Passage]:
    """``ranked`` (best first) as passages, best first, each document holding at most ``per_document``.

    With group "none" every chunk is its own passage (only the cap applies). A chunk that joins two
    passages of its document into one merges them, at the better one's rank; a chunk that touches no
    passage of a document already at its cap is left out.
    """
    out: list[Passage] = []
    by_doc: dict[int, list[Passage]] = {}
    for hit, score in ranked:
        mine = by_doc.setdefault(hit.document_id, [])
        near = [p for p in mine if p.touches(hit)] if group == "passages" else []
        if not near:
            if per_document is None or len(mine) < per_document:
                p = Passage(hit, score, [hit])
                mine.append(p)
                out.append(p)
            continue
        first, *rest = near  # in rank order: `mine` is appended to as passages are made
        first.chunks.append(hit)
        for other in rest:  # the chunk bridges passages: they become one
            first.chunks.extend(other.chunks)
            mine.remove(other)
            out.remove(other)
    return out


# Grouping ranks GROUP_FACTOR chunks per wanted passage; while that leaves too few passages (one
# document filling the candidates) and the candidates are not exhausted, it ranks GROUP_GROWTH times
# as many, at most GROUP_ROUNDS times: the last round ranks 48 times as many chunks as the first.
GROUP_FACTOR, GROUP_GROWTH, GROUP_ROUNDS = 3, 4, 2


class RankChunks(Protocol):
    def __call__(self, k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        """The best ``k`` chunks, best first, from ``candidates`` per candidate list (None: the default)."""
        ...


def best_passages(
    rank: RankChunks, want: int, min_candidates: int, group: Group, per_document: int | None
) -> list[Passage]:
    """The best ``want`` passages of one dataset, from its ranked chunks (``rank``).

    Grouping and the cap leave chunks out, so GROUP_FACTOR times as many chunks are ranked, from as
    many candidates (at least ``min_candidates``), and more while too few passages come of them.
    Raw chunks without a cap rank ``want`` chunks, as an ungrouped search always did.
    """
    if group == "none" and per_document is None:
        return group_hits(rank(want), group, None)
    chunks, candidates = want * GROUP_FACTOR, max(want * GROUP_FACTOR, min_candidates)
    for round_ in range(GROUP_ROUNDS + 1):
        ranked = rank(chunks, candidates=candidates)
        passages = group_hits(ranked, group, per_document)
        if len(passages) >= want or len(ranked) < chunks or round_ == GROUP_ROUNDS:
            break
        chunks, candidates = chunks * GROUP_GROWTH, candidates * GROUP_GROWTH
    return passages[:want]
