"""A store written from the interface alone: datasets held in memory, for tests.

It proves the seam in ``mcpower.store``: ingest, search, the lookups and the MCP server work over
any Catalog and Store, not only the local one. Vectors are searched exactly; keyword scores are a
plain BM25 over lower-cased words (not FTS5's, so its scores differ from the local store's).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from mcpower.analysis import index_terms, query_languages, query_terms
from mcpower.errors import DatasetLockedError
from mcpower.manifest import DatasetInfo
from mcpower.results import SearchFilters, normalize_rel
from mcpower.store import ChunkHit, ChunkRow, DatasetBuild, DatasetEntry, DocumentRow, DocumentSummary
from mcpower.terms import split_terms


@dataclass
class MemoryKeywordMatches:
    scores: dict[int, float]

    def top(self, k: int) -> list[tuple[int, float]]:
        return sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]

    def scores_of(self, ids: Iterable[int]) -> dict[int, float]:
        return {i: self.scores[i] for i in ids if i in self.scores}


class MemoryStore:
    """One published build, searched in memory."""

    def __init__(self, build: DatasetBuild) -> None:
        self._build = build
        self._docs = {d.id: d for d in build.documents}
        self._hits = {c.id: self._hit(c) for c in build.chunks}
        self._row = {c.id: i for i, c in enumerate(build.chunks)}
        # Analysed as the local store analyses them (mcpower.analysis) when the build says so.
        analysis = build.info.analysis
        self._languages = (
            query_languages(build.info.counts.languages) if analysis is not None and analysis.scheme else None
        )
        self._terms = {c.id: Counter(self._analyse(f"{c.text} {c.heading_path}", c.language)) for c in build.chunks}
        self.closed = False

    @property
    def info(self) -> DatasetInfo:
        return self._build.info

    def close(self) -> None:
        self.closed = True

    def _hit(self, c: ChunkRow) -> ChunkHit:
        d = self._docs[c.document_id]
        return ChunkHit(
            c.id,
            c.ordinal,
            c.heading_path,
            c.start_line,
            c.end_line,
            c.text,
            d.path,
            d.title,
            d.file_type,
            d.id,
            d.indexed_at,
            d.size,
            d.mtime,
            c.page_start,
            c.page_end,
            c.language,
        )

    def _allowed(self, where: SearchFilters | None) -> list[int]:
        out = []
        for cid, hit in self._hits.items():
            if where is not None and where.path and hit.path != normalize_rel(where.path):
                continue
            if where is not None and where.folder and not hit.path.startswith(normalize_rel(where.folder) + "/"):
                continue
            if where is not None and where.file_type and hit.file_type != "." + where.file_type.lower().lstrip("."):
                continue
            out.append(cid)
        return out

    def semantic(self, vector: np.ndarray, k: int, where: SearchFilters | None = None) -> list[tuple[int, float]]:
        ids = self._allowed(where)
        sims = [(i, float(self._build.vectors[self._row[i]] @ vector)) for i in ids]
        return sorted(sims, key=lambda kv: (-kv[1], kv[0]))[:k]

    def _analyse(self, text: str, language: str) -> list[str]:
        return index_terms(text, language) if self._languages is not None else split_terms(text)

    def keyword(self, query: str, where: SearchFilters | None = None) -> MemoryKeywordMatches:
        words = set(query_terms(query, self._languages) if self._languages is not None else split_terms(query))
        n = len(self._terms) or 1
        avg = sum(sum(t.values()) for t in self._terms.values()) / n
        scores: dict[int, float] = {}
        for i in self._allowed(where):
            tf, size = self._terms[i], sum(self._terms[i].values())
            score = 0.0
            for w in words & tf.keys():
                df = sum(1 for t in self._terms.values() if w in t)
                idf = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)
                score += idf * tf[w] * 2.2 / (tf[w] + 1.2 * (0.25 + 0.75 * size / avg))
            if score > 0:
                scores[i] = score
        return MemoryKeywordMatches(scores)

    def vectors(self, ids: Sequence[int]) -> np.ndarray:
        return np.asarray([self._build.vectors[self._row[i]] for i in ids], dtype=np.float32).reshape(
            len(ids), self.info.embedding.dimension
        )

    def chunks(self, ids: Sequence[int], text: bool = True) -> dict[int, ChunkHit]:
        return {i: self._hits[i] if text else replace(self._hits[i], text="") for i in ids if i in self._hits}

    def neighbors(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        same = [h for h in self._hits.values() if h.document_id == hit.document_id]
        return sorted(
            (h for h in same if hit.ordinal - before <= h.ordinal <= hit.ordinal + after), key=lambda h: h.ordinal
        )

    def chunk_count(self, document_id: int) -> int:
        return sum(1 for h in self._hits.values() if h.document_id == document_id)

    def document(self, path: str) -> DocumentRow | None:
        return next((d for d in self._docs.values() if d.path == path), None)

    def document_by_id(self, document_id: int) -> DocumentRow | None:
        return self._docs.get(document_id)

    def documents(self, limit: int | None = None) -> list[DocumentSummary]:
        docs = sorted(self._docs.values(), key=lambda d: d.id)[: None if limit is None else max(limit, 0)]
        return sorted(
            (DocumentSummary(d.path, d.title, d.file_type, d.size, d.mtime) for d in docs), key=lambda d: d.path
        )

    def iter_documents(self) -> Iterator[tuple[DocumentRow, list[ChunkRow]]]:
        for d in self._docs.values():
            yield d, sorted((c for c in self._build.chunks if c.document_id == d.id), key=lambda c: c.ordinal)


@dataclass
class MemoryCatalog:
    """Datasets published into a dict; one version each, switched in one assignment."""

    name: str = "memory"
    builds: dict[str, tuple[int, DatasetBuild]] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)

    def scan(self) -> list[DatasetEntry]:
        return [DatasetEntry(i, b.info, None, f"{self.name}:{i}", version) for i, (version, b) in self.builds.items()]

    def refresh(self, entry: DatasetEntry) -> DatasetEntry:
        version, build = self.builds.get(entry.id, (None, None))
        if build is None or version == entry.version:
            return entry
        return DatasetEntry(entry.id, build.info, None, entry.location, version)

    def open(self, entry: DatasetEntry) -> MemoryStore:
        return MemoryStore(self.builds[entry.id][1])

    @contextmanager
    def lock(self, dataset_id: str, wait: bool = False) -> Iterator[None]:
        lock = self._locks.setdefault(dataset_id, threading.Lock())
        if not lock.acquire(blocking=wait):
            raise DatasetLockedError(f"dataset {dataset_id!r} is being written")
        try:
            yield
        finally:
            lock.release()

    def current(self, dataset_id: str) -> MemoryStore | None:
        found = self.builds.get(dataset_id)
        return MemoryStore(found[1]) if found else None

    def publish(self, build: DatasetBuild) -> DatasetInfo:
        version = self.builds.get(build.info.id, (0, None))[0] + 1
        self.builds[build.info.id] = (version, build)
        return build.info

    def location(self, dataset_id: str) -> str:
        return f"{self.name}:{dataset_id}"

    def contains(self, dataset_id: str) -> bool:
        return dataset_id in self.builds
