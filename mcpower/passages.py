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

from typing import Literal, Protocol

from mcpower.defaults import DEFAULT_PER_DOCUMENT, MAX_PER_DOCUMENT
from mcpower.errors import InvalidQueryError
from mcpower.store import ChunkHit

Group = Literal["passages", "none"]
GROUPS: tuple[Group, ...] = ("passages", "none")


class Passage:
    """Adjacent or overlapping ranked chunks of one section, named and scored by the best of them."""

    __slots__ = ("best", "chunks", "end_line", "first", "last", "score", "start_line")

    def __init__(self, best: ChunkHit, score: float) -> None:
        self.best, self.score = best, score
        self.chunks = [best]  # best first, then in the order they joined
        self.first, self.last = best.ordinal, best.ordinal  # positions in the document
        self.start_line, self.end_line = best.start_line, best.end_line

    def add(self, chunks: list[ChunkHit]) -> None:
        self.chunks += chunks
        self.first, self.last = (
            min(self.first, *(c.ordinal for c in chunks)),
            max(self.last, *(c.ordinal for c in chunks)),
        )
        self.start_line = min(self.start_line, *(c.start_line for c in chunks))
        self.end_line = max(self.end_line, *(c.end_line for c in chunks))

    def touches(self, hit: ChunkHit) -> bool:
        """Whether ``hit`` (of the same document) is of the passage's section and follows, precedes or
        overlaps it."""
        return hit.heading_path == self.best.heading_path and (
            self.first - 1 <= hit.ordinal <= self.last + 1
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
    return _Grouping(group, per_document).feed(ranked)


class _Grouping:
    """group_hits as a fold, so that a longer ranking with the same start only feeds its new chunks."""

    def __init__(self, group: Group, per_document: int | None) -> None:
        self.group, self.per_document = group, per_document
        self.out: list[Passage] = []
        self.by_doc: dict[int, list[Passage]] = {}
        self.fed = 0

    def feed(self, ranked: list[tuple[ChunkHit, float]]) -> list[Passage]:
        for hit, score in ranked[self.fed :]:
            mine = self.by_doc.setdefault(hit.document_id, [])
            near = [p for p in mine if p.touches(hit)] if self.group == "passages" else []
            if not near:
                if self.per_document is None or len(mine) < self.per_document:
                    p = Passage(hit, score)
                    mine.append(p)
                    self.out.append(p)
                continue
            first, *rest = near  # in rank order: `mine` is appended to as passages are made
            first.add([hit])
            for other in rest:  # the chunk bridges passages: they become one
                first.add(other.chunks)
                mine.remove(other)
                self.out.remove(other)
        self.fed = max(self.fed, len(ranked))
        return self.out


# Grouping ranks every candidate of a candidate depth, then groups them: what a passage spans, and so
# which passages a list holds, depends only on the candidates, never on how many passages were asked
# for. (Ranking only as many chunks as passages were wanted first, then more, made a top 7 keep two
# passages of one section that the chunk between them, ranked 15th, joins into one: the page of a
# list from offset 6 then disagreed with the whole list.) Candidate depths are min_candidates times a
# power of GROUP_GROWTH, the first that holds GROUP_FACTOR times the passages wanted (on documentation
# the 3k best chunks hold k passages for three in four questions), so a page and the whole list agree
# whenever they rank the same candidates (every list of up to 16 results at the usual 50). Too few
# passages: GROUP_GROWTH times as many candidates, at most GROUP_ROUNDS times (16 times as deep at
# most). Candidates are scored once per depth (search._Sides), their chunks fetched once per query.
GROUP_FACTOR, GROUP_GROWTH, GROUP_ROUNDS = 3, 4, 2


class RankChunks(Protocol):
    def __call__(self, k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        """The best ``k`` chunks, best first, from ``candidates`` per candidate list (None: the default)."""
        ...


def best_passages(
    rank: RankChunks, want: int, min_candidates: int, group: Group, per_document: int | None
) -> list[Passage]:
    """The best ``want`` passages of one dataset, from its ranked chunks (``rank``): the first
    ``want`` of the passages that every candidate of a depth makes (the steps above), so the first
    passages of a longer list are this list.

    Grouping and the cap leave chunks out, so more candidates are ranked while too few passages come
    of them. Raw chunks without a cap rank ``want`` chunks, as an ungrouped search always did.
    """
    if group == "none" and per_document is None:
        return group_hits(rank(want), group, None)
    candidates = min_candidates
    while candidates < want * GROUP_FACTOR:
        candidates *= GROUP_GROWTH
    passages: list[Passage] = []
    for depth in (candidates * GROUP_GROWTH**r for r in range(GROUP_ROUNDS + 1)):
        ranked = rank(depth, candidates=depth)
        passages = group_hits(ranked, group, per_document)
        # Fewer chunks than candidates ranked, with as many candidates on each side: none are left.
        if len(passages) >= want or len(ranked) < depth:
            break
    return passages[:want]
