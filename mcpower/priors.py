"""Document priors: what a documentation search knows about a page before it reads the question.

One prior so far: **change notes** (changelogs, release notes, "what's new" pages, porting and
migration guides) rank below the pages that document a feature. Such a page names every feature in
a line or two, so it matches a short question about any of them about as well as the page that
explains it, and a big one (FastAPI's release notes) then ranks first for questions a tutorial
answers. A chunk is change notes when

    path    a folder or the file's stem says so: releases/, changelog/, whatsnew/, release-notes/ ...;
            a stem such as CHANGES, HISTORY, NEWS, changelog-2023, release-notes-1.2, whatsnew-3.11,
            migrating-to-v2, porting-guide, upgrading (separators and case ignored)
    title   its document's title says so: "Release Notes", "Changelog", "What's New in 3.11",
            "Django 4.2 release notes", "Porting guide", "Migration guide", "Changes", "History"
    shape   a heading above it is a version heading: a version number alone, or after Version,
            Release or v, or with a date ("0.100.0 (2023-07-07)", "Version 3.1.2", "Release 5.3.0
            (released Oct 16, 2022)", "[1.2.0] - 2024-01-01", "2023-01-05, Version 19.4.0")

and its score is multiplied by CHANGE_NOTES_FACTOR, unless the question is about versions or
changes: it names a version number, or says changelog, release, new in, what's new, deprecated,
changed, removed, since, migrate, upgrade, porting, breaking, version, history, backwards
compatible... Then no prior applies: the change notes compete on their own score.

The kind is computed at query time, from the path, title and heading path every store keeps (local,
Milvus, the original system's), so no store or dataset format changes and a dataset built before
keeps working; it is looked at only for the candidates that could reach the top k, and kept with
each hit (``store.ChunkHit.change_notes``), so hits a store holds in memory are judged once.

Switch: ``priors=False`` (tool argument ``priors: false``, ``mcpower search --no-priors``,
``mcpower eval --no-priors``) ranks by the score alone. docs/search.md explains it to users.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Protocol, TypeVar

# A change-notes chunk keeps this share of its score (unless the question is about changes): the
# FastAPI docs' questions measured best at 0.80-0.85 and are flat around it; a Sphinx set (Flask,
# Jinja, Sphinx docs) the same (docs/search.md, "Document priors").
CHANGE_NOTES_FACTOR = 0.85
# Candidates whose kind is looked up at once after the first k, while the top k is not settled yet.
BATCH = 16

_SEP = re.compile(r"[\s_.\-'’]+")
# File stems (and folder names) that are change notes when they are the whole name ...
_EXACT = frozenset(
    {
        "changes",
        "changelog",
        "changelogs",
        "history",
        "news",
        "releases",
        "releasenotes",
        "whatsnew",
        "migrationguide",
        "portingguide",
        "upgradeguide",
        "upgrading",
    }
)
# ... or begin the name ('release-notes-1.2', 'whatsnew-3.11', 'migrating-to-v2', 'porting-to-py3').
# Not 'migrat' alone: a page about database migrations is no migration guide.
_PREFIXES = ("changelog", "releasenotes", "whatsnew", "migrating", "migrateto", "migratefrom", "porting", "upgrading")
_TITLE = re.compile(
    r"\b(?:release\s+notes|change\s*log|what['’]?s\s+new|porting\s+(?:guide|to)|migration\s+guide|"
    r"upgrad(?:e|ing)\s+guide|release\s+history|version\s+history)\b"
    r"|^\s*(?:changes|history|news)\s*$",
    re.IGNORECASE,
)
_VERSION = r"v?\d+\.\d+(?:\.\d+)*(?:[-.]?(?:a|b|rc|alpha|beta|dev|post)\.?\d*)?"
_VERSION_HEADING = re.compile(
    r"^\s*(?:\d{4}-\d{2}-\d{2},?\s+)?"  # Node: "2023-01-05, Version 19.4.0 (Current)"
    r"(?:version|release|v)?\s*\[?" + _VERSION + r"\]?"
    r"(?:\s*(?:[(\[,:–—-]|released\b|\bunreleased\b).*)?\s*$",
    re.IGNORECASE,
)
_ABOUT_CHANGES = re.compile(
    r"\d+\.\d+|\bv\d+\b"
    r"|\b(?:change\s*logs?|changed|changes\s+in|releases?|released|release\s+notes|new\s+in|what['’]?s\s+new"
    r"|deprecat\w*|removed|since|migrat\w*|upgrad\w*|porting|breaking|versions?|history|backwards?[\s-]compat\w*)\b",
    re.IGNORECASE,
)


class Located(Protocol):
    """A chunk whose kind is known: ``is_change_notes`` of its path, title and heading path
    (store.ChunkHit works it out once a hit)."""

    @property
    def change_notes(self) -> bool: ...


H = TypeVar("H", bound=Located)


def about_changes(query: str) -> bool:
    """Whether a question asks about versions or changes (then change notes are not ranked down)."""
    return _ABOUT_CHANGES.search(query) is not None


# A pure function of three strings, asked again for the same chunks at every step of a grouped search
# (passages.best_passages) and for the same pages across questions: remembered, a bounded number.
@lru_cache(maxsize=8192)
def is_change_notes(path: str, title: str, heading_path: str, separator: str = " > ") -> bool:
    """Whether a chunk at ``path`` under ``heading_path`` in a document titled ``title`` is change
    notes, by path, title or shape (module docstring)."""
    parts = [p for p in path.lower().split("/") if p]
    for i, part in enumerate(parts):
        name = part.split(".", 1)[0] if i == len(parts) - 1 else part
        squashed = _SEP.sub("", name)
        if squashed in _EXACT or squashed.startswith(_PREFIXES):
            return True
    if _TITLE.search(title):
        return True
    return any(_VERSION_HEADING.match(h) for h in heading_path.split(separator) if h)


def apply_priors(
    ranked: Sequence[tuple[int, float]],
    fetch: Callable[[list[int]], Mapping[int, H]],
    query: str,
    k: int,
    enabled: bool = True,
) -> list[tuple[H, float]]:
    """The best ``k`` of ``ranked`` (chunk id, score; best first) with the priors applied, as
    (chunk, score) best first; ``fetch`` gives the chunks of some ids (ids it does not know are
    dropped). A prior only lowers a score, so candidates are fetched in batches until the next one's
    own score cannot beat the k-th best so far: when no change notes are in the top k, the top k
    alone, as without priors.
    """
    if not enabled or about_changes(query):
        head = list(ranked[:k])
        hits = fetch([i for i, _ in head])
        return [(hits[i], s) for i, s in head if i in hits]
    out: list[tuple[float, int, H]] = []  # (-score, rank, chunk): sorted as they stand, best first
    pos = 0
    while pos < len(ranked):
        batch = ranked[pos : pos + (k if pos == 0 else max(k, BATCH))]
        hits = fetch([i for i, _ in batch])
        for rank, (i, s) in enumerate(batch, pos):
            hit = hits.get(i)
            if hit is not None:
                prior = CHANGE_NOTES_FACTOR if hit.change_notes else 1.0
                out.append((-(s * prior), rank, hit))  # ranks differ: chunks are never compared
        pos += len(batch)
        out.sort()
        if len(out) >= k and (pos >= len(ranked) or ranked[pos][1] <= -out[k - 1][0]):
            break
    return [(hit, -s) for s, _, hit in out[:k]]
