"""Distinct results: ranked chunks grouped into passages, and a cap on passages per document.

Chunking overlaps consecutive chunks for recall, so the chunks that match a question best are often
neighbours in one document. Returned as they are, they fill a top 5 with one place, repeated. A
search therefore groups its ranked chunks before the top k is cut:

    passages      chunks of one section (document and heading path) that overlap or follow each other
                  (consecutive positions, or line ranges that overlap or touch) are one passage: its
                  lines span them all, and it ranks, scores and is named (result id) by its best
                  chunk, whose text the snippet is taken from; chunks of different sections stay
                  apart, so a result's heading path is always the section it is in. A passage is a
                  place: one span of one section.
    spread        (the default) the first SPREAD_HEAD results hold at most DEFAULT_PER_DOCUMENT
                  passages of one document, so the top of the list spans several documents; the
                  results after them are the best remaining places, wherever they are. A long
                  document (a book's chapter, a big PDF) is many places: its third, fourth ... matching
                  sections are pushed below the first five, not left out, and a dataset of one
                  document still fills its top k.
    per document  an explicit ``per_document`` caps every result: a document takes at most that many
                  passages (or chunks, ungrouped) and its other places are left out

Grouping walks the ranked list once, best first, and spreading only pushes a document's later places
down, so each document first appears at its best chunk's rank: the order of documents by their best
chunk — what `mcpower eval` measures — is the ungrouped order. docs/search.md explains the choice of
default; benchmarks/distinct.py measures it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

from mcpower.defaults import DEFAULT_PER_DOCUMENT, MAX_PER_DOCUMENT, SPREAD_HEAD
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


class Spread(NamedTuple):
    """How a search makes its results distinct: the grouping, the per-document cap and how far down
    the cap holds (``head``: the first ``head`` results; None: every result)."""

    group: Group
    per_document: int | None
    head: int | None = None


def validate_grouping(group: str, per_document: int | None) -> Spread:
    """The grouping and the per-document cap it implies: for passages, DEFAULT_PER_DOCUMENT over the
    first SPREAD_HEAD results; for raw chunks, none; unless ``per_document`` is given, which caps
    every result.

    Raises:
        InvalidQueryError: an unknown group or a cap that is not a whole number from 1 to MAX_PER_DOCUMENT.
    """
    g = next((x for x in GROUPS if x == group), None)
    if g is None:
        raise InvalidQueryError(f"group must be passages or none, got {str(group)[:20]!r}")
    if per_document is None:
        return Spread(g, DEFAULT_PER_DOCUMENT, SPREAD_HEAD) if g == "passages" else Spread(g, None)
    if isinstance(per_document, bool) or not isinstance(per_document, int) or not 1 <= per_document <= MAX_PER_DOCUMENT:
        raise InvalidQueryError(
            f"per_document must be a whole number from 1 to {MAX_PER_DOCUMENT}, got {str(per_document)[:20]}"
        )
    return Spread(g, per_document)


def group_hits(
    ranked: list[tuple[ChunkHit, float]], group: Group, per_document: int | None, head: int | None = None
) -> list[Passage]:
    """``ranked`` (best first) as passages, made distinct by ``per_document`` and ``head`` (see choose).

    With group "none" every chunk is its own passage (only the cap applies). A chunk that joins two
    passages of its document into one merges them, at the better one's rank.
    """
    return choose(_Grouping(group).feed(ranked), per_document, head)[0]


def choose(passages: list[Passage], per_document: int | None, head: int | None) -> tuple[list[Passage], int]:
    """``passages`` (best first) made distinct, and how many of the first results were chosen under the cap.

    No cap: all of them. A cap and no ``head``: each document's first ``per_document`` passages, the
    rest left out. A cap and a ``head``: the first ``head`` results are passages of documents still
    under the cap, in rank order; after them every passage left, in rank order (those pushed down
    first: they rank above every passage not yet looked at). When the passages run out before the
    head is full, the pushed-down ones fill it.
    """
    if per_document is None:
        return passages, len(passages)
    taken: dict[int, int] = {}
    chosen: list[Passage] = []
    pushed: list[Passage] = []
    for i, p in enumerate(passages):
        if head is not None and len(chosen) >= head:
            return chosen + pushed + passages[i:], len(chosen)
        n = taken.get(p.best.document_id, 0)
        if n < per_document:
            taken[p.best.document_id] = n + 1
            chosen.append(p)
        elif head is not None:
            pushed.append(p)
    return chosen + pushed, len(chosen)


class _Grouping:
    """Ranked chunks as passages, fed best first."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.out: list[Passage] = []
        # Passages by section (document, heading path): only a passage of the chunk's own section can
        # take it, so a chunk is compared with those alone, not with every place of a long document.
        self.by_section: dict[tuple[int, str], list[Passage]] = {}
        self.fed = 0

    def feed(self, ranked: list[tuple[ChunkHit, float]]) -> list[Passage]:
        grouping, by_section, out = self.group == "passages", self.by_section, self.out
        for hit, score in ranked[self.fed :]:
            section = (hit.document_id, hit.heading_path)
            mine = by_section.get(section)
            if mine is None:
                by_section[section] = mine = []
            near = [p for p in mine if p.touches(hit)] if grouping and mine else None
            if not near:
                p = Passage(hit, score)
                mine.append(p)
                out.append(p)
                continue
            first, *rest = near  # in rank order: `mine` is appended to as passages are made
            first.add([hit])
            for other in rest:  # the chunk bridges passages: they become one
                first.add(other.chunks)
                mine.remove(other)
                out.remove(other)
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


def best_passages(rank: RankChunks, want: int, min_candidates: int, spread: Spread) -> list[Passage]:
    """The best ``want`` passages of one dataset, from its ranked chunks (``rank``), made distinct by
    ``spread``: the first ``want`` of the passages that every candidate of a depth makes (the steps
    above), so the first passages of a longer list are this list.

    Grouping and the cap leave chunks out or push them down, so more candidates are ranked while too
    few passages come of them, or too few places of documents under the cap for the first results.
    Raw chunks without a cap rank ``want`` chunks, as an ungrouped search always did.
    """
    group, per_document, head = spread
    if group == "none" and per_document is None:
        return group_hits(rank(want), group, None)
    under_cap = want if head is None else min(head, want)  # results that must come from documents under the cap
    candidates = min_candidates
    while candidates < want * GROUP_FACTOR:
        candidates *= GROUP_GROWTH
    passages: list[Passage] = []
    for depth in (candidates * GROUP_GROWTH**r for r in range(GROUP_ROUNDS + 1)):
        ranked = rank(depth, candidates=depth)
        passages, capped = choose(_Grouping(group).feed(ranked), per_document, head)
        # Fewer chunks than candidates ranked, with as many candidates on each side: none are left.
        if (capped >= under_cap and len(passages) >= want) or len(ranked) < depth:
            break
    return passages[:want]
