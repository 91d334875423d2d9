"""Stores: where a dataset's documents, chunks, vectors and keyword index live, behind one interface.

Two interfaces, written so that a new engine is a new sub-package implementing them and nothing else:

    Store     one published version of one dataset, loaded: vector and keyword candidates,
              lookups by chunk id, documents (search, get_source and the server read through it)
    Catalog   a place datasets live (a datasets folder; an engine): finds them, loads them, and
              publishes a new version atomically under a writer's lock (ingest writes through it)

The first implementation is ``store/local/``: FAISS vectors and a SQLite database (documents,
chunks, FTS5, BM25 postings) per version, under ``datasets/<id>/``. Rows cross the interface as the
typed records below, filters as :class:`~mcpower.results.SearchFilters`; nothing of an engine's
own types (connections, cursors, index objects, row ids) leaves its sub-package.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcpower.analysis.languages import UNDETERMINED
from mcpower.errors import InvalidManifestError, McpowerError
from mcpower.manifest import DatasetInfo
from mcpower.results import DatasetSummary, SearchFilters, WatchState

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

__all__ = [
    "Catalog",
    "ChunkHit",
    "ChunkRow",
    "DatasetBuild",
    "DatasetEntry",
    "DocumentRow",
    "DocumentSummary",
    "KeywordMatches",
    "SearchFilters",
    "Store",
    "chunk_id",
    "unexpected_error",
]


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class DocumentRow:
    """A source document as ingested: its file facts and its whole text."""

    id: int  # position in its dataset version, from 1
    path: str  # relative to the ingested folder, '/'-separated
    title: str
    file_type: str  # lower-case suffix, '.md'
    size: int
    mtime: float
    content_hash: str  # sha256 of the file's bytes
    indexed_at: str  # ISO 8601, UTC
    content: str


@dataclass(frozen=True)
class ChunkRow:
    """One chunk of a document, as stored."""

    id: int  # chunk_id(): stable across ingests
    document_id: int
    ordinal: int  # position in its document, from 0
    heading_path: str
    start_line: int  # 1-based, inclusive
    end_line: int
    text: str
    page_start: int | None = None  # first page of the chunk, from 1 (PDF); None: no pages
    page_end: int | None = None
    language: str = UNDETERMINED  # the chunk's language (mcpower.analysis), 'und' when not known


@dataclass(frozen=True)
class ChunkHit:
    """A chunk with its document's fields, as search and get_source need them."""

    id: int
    ordinal: int
    heading_path: str
    start_line: int
    end_line: int
    text: str
    path: str
    title: str
    file_type: str
    document_id: int
    # The document's file as ingested, for freshness: a result says when it was indexed, and whether
    # the file has changed since (another size or modification time).
    indexed_at: str = ""
    size: int = -1
    mtime: float = 0.0
    page_start: int | None = None  # the PDF pages the chunk is on; None for other formats
    page_end: int | None = None
    language: str = UNDETERMINED  # as ChunkRow.language

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> ChunkHit:
        """The hit of a row holding every field in order: what ``ChunkHit(*row)`` makes, in half the
        time (a frozen dataclass's __init__ sets its 16 fields one call each; a search reads ~100 rows)."""
        hit = object.__new__(cls)
        hit.__dict__.update(zip(_HIT_FIELDS, row, strict=True))
        return hit

    @cached_property
    def change_notes(self) -> bool:
        """Whether the chunk is change notes (mcpower.priors), worked out once a hit: a store that
        keeps its places in memory hands the same hits to every search, which asks each candidate."""
        from mcpower.priors import is_change_notes  # with the search module: not at a server's start

        return is_change_notes(self.path, self.title, self.heading_path)


_HIT_FIELDS = tuple(f.name for f in fields(ChunkHit))


@dataclass(frozen=True)
class DocumentSummary:
    """A document as a listing shows it."""

    path: str
    title: str
    file_type: str
    size: int
    mtime: float = 0.0  # as recorded at ingest (watching compares it with the file's)


MAX_CHUNK_ID = 0x7FFF_FFFF_FFFF_FFFF  # chunk ids are non-negative int64 (FAISS ids are signed)


def chunk_id(path: str, text: str, occurrence: int) -> int:
    """Stable id of a chunk: the same text at the same path gets the same id on every ingest.

    Result ids are built from it, so every store must key chunks by it.
    """
    digest = hashlib.blake2b(f"{path}\0{occurrence}\0{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & MAX_CHUNK_ID


# ---------------------------------------------------------------- reading


class KeywordMatches(Protocol):
    """The chunks a keyword query matched, with their BM25 (as SQLite FTS5's bm25() scores it)."""

    def top(self, k: int) -> list[tuple[int, float]]:
        """The best ``k`` (chunk id, BM25) pairs, best first; equal scores by ascending id."""
        ...

    def scores_of(self, ids: Iterable[int]) -> dict[int, float]:
        """BM25 of those of ``ids`` that matched (the others scored 0)."""
        ...


class Store(Protocol):
    """One loaded, verified version of one dataset. Thread-safe; never changes once loaded."""

    @property
    def info(self) -> DatasetInfo: ...

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""

    def semantic(
        self, vector: NDArray[np.float32], k: int, where: SearchFilters | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, cosine) pairs, best first, among the chunks ``where`` allows."""
        ...

    def keyword(self, query: str, where: SearchFilters | None = None) -> KeywordMatches:
        """The chunks ``where`` allows that hold a term of ``query``.

        Raises:
            IndexMismatchError: the keyword index does not fit the chunks.
        """
        ...

    def vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        """The stored unit vectors of these chunk ids, in order, shape (len(ids), dimension)."""
        ...

    def chunks(self, ids: Sequence[int], text: bool = True) -> dict[int, ChunkHit]:
        """The chunks with these ids (unknown ids are simply absent). Without ``text`` a store may
        leave each chunk's text '' where reading it costs more than reading the few chosen again:
        a search ranks and groups its candidates by place, then reads the text of the results."""
        ...

    def neighbors(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        """The chunks of ``hit``'s document from ``before`` ahead of it to ``after`` behind it, in order."""
        ...

    def chunk_count(self, document_id: int) -> int: ...

    def document(self, path: str) -> DocumentRow | None: ...

    def document_by_id(self, document_id: int) -> DocumentRow | None: ...

    def documents(self, limit: int | None = None) -> list[DocumentSummary]:
        """Every document, by path; given ``limit``, the first ``limit`` ingested (lowest ids), by
        path, read at a cost of O(limit) rows whatever the dataset's size (resources/list)."""
        ...

    def iter_documents(self) -> Iterator[tuple[DocumentRow, list[ChunkRow]]]:
        """Every document with its chunks in order (incremental ingest carries unchanged ones over)."""
        ...


# ---------------------------------------------------------------- finding and publishing


@dataclass
class DatasetEntry:
    """A dataset a catalog found: ready to load, or an error with its reason."""

    id: str
    info: DatasetInfo | None
    error: McpowerError | None = None
    location: str = ""  # where it lives, for messages: 'docs' (a folder under the root), a collection ...
    # The catalog's mark of the version it read (a file stamp, a version name): a changed mark means
    # the dataset was republished since.
    version: object = field(default=None, repr=False, compare=False)
    handle: object = field(default=None, repr=False, compare=False)  # the catalog's own: a folder ...
    notes: list[str] = field(default_factory=list, compare=False)  # worth knowing, not errors
    watch: WatchState | None = field(default=None, compare=False)  # a live watcher's report, if one watches it

    @property
    def status(self) -> Literal["ready", "error"]:
        return "error" if self.error else "ready"

    def summary(self) -> DatasetSummary:
        m = self.info
        if m is None or self.error is not None:
            return DatasetSummary(id=self.id, status="error", error=self.error.message if self.error else "unknown")
        return DatasetSummary(
            id=m.id,
            status="ready",
            name=m.name,
            description=m.description,
            default_top_k=m.default_top_k,
            documents=m.counts.documents,
            chunks=m.counts.chunks,
            file_types=dict(m.counts.file_types) or None,
            languages=dict(m.counts.languages) or None,
            model=m.embedding.model,
            backend=m.embedding.backend,
            updated_at=m.updated_at.isoformat(),
            format=m.format,
            watched=self.watch is not None,
            watch_state=self.watch.state if self.watch else None,
            watch_message=self.watch.message if self.watch else None,
        )


def unexpected_error(where: str, error: Exception, logged: set[str]) -> InvalidManifestError:
    """The error of a dataset whose description failed in a way no check of its catalog foresaw
    (a bug, or input no rule covers yet): that dataset's INVALID_MANIFEST, so that the others are
    still listed and served. It is logged at warning with its traceback, once per message in
    ``logged`` (every scan meets it again), as it is worth reporting. The message names the
    exception's type, and its text only if that holds no path (messages name no absolute path).
    """
    text = " ".join(str(error).split())[:120]
    if "/" in text or "\\" in text or not text.isprintable():
        text = ""
    reason = type(error).__name__ + (f": {text}" if text else "")
    err = InvalidManifestError(
        f"{where}: its description cannot be read ({reason}), a case mcpower does not check; "
        "re-ingest or remove the dataset, and please report it"
    )
    if err.message not in logged:
        logged.add(err.message)
        logger.warning(
            "dataset.error %s",
            err.message,
            exc_info=error,
            extra={"event": "dataset.error", "dataset": where, "code": err.code},
        )
    return err


@dataclass(frozen=True)
class DatasetBuild:
    """A new version of a dataset, complete, for :meth:`Catalog.publish`."""

    info: DatasetInfo
    documents: list[DocumentRow]
    chunks: list[ChunkRow]
    vectors: NDArray[np.float32]  # row i is the vector of chunks[i]


class Catalog(Protocol):
    """A place datasets live. Readers never lock; one writer per dataset holds its lock."""

    def scan(self) -> list[DatasetEntry]:
        """Every dataset there, ready or with its error; cheap to repeat (unchanged ones are not re-read)."""
        ...

    def refresh(self, entry: DatasetEntry) -> DatasetEntry:
        """``entry`` itself if its dataset is unchanged, else the entry of the version published since."""
        ...

    def open(self, entry: DatasetEntry) -> Store:
        """Load and verify the version ``entry`` describes.

        Raises:
            DatasetUnavailableError (and subclasses): missing, corrupt or inconsistent.
        """
        ...

    def lock(self, dataset_id: str, wait: bool = False) -> AbstractContextManager[None]:
        """Hold the dataset's write lock.

        Raises:
            DatasetLockedError: another writer holds it and ``wait`` is False.
            IngestError: the lock cannot be taken (read-only or full disk ...).
        """
        ...

    def current(self, dataset_id: str) -> Store | None:
        """The published version of a dataset, to carry unchanged documents over; None if there is
        none or it is unusable (a writer holding the lock rebuilds it from scratch)."""
        ...

    def publish(self, build: DatasetBuild) -> DatasetInfo:
        """Make ``build`` the dataset's current version in one step; readers see the old version or
        the new one, never a mix, and a crash at any point leaves the old one serving.
        The caller holds the dataset's lock.

        Raises:
            IngestError: the version cannot be written (disk full ...); the old one is untouched.
        """
        ...

    def location(self, dataset_id: str) -> str:
        """Where the dataset lives, for people (a folder path, a collection name ...)."""
        ...

    def contains(self, dataset_id: str) -> bool:
        """Whether a dataset with this id is here now — a cheap check (no full scan), asked before
        rescanning for an id the last scan did not know."""
        ...
