"""Registry: every dataset under a datasets root, its status, and searches over the loaded stores.

Following the seed's registry rules, manifests are found recursively; an invalid one is reported
with its reason and excluded, and the rest stay usable. Stores are loaded once, cached, and reloaded
when their manifest is replaced by a newer ingest (a stat per search notices).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import TypeAdapter

from mcpower.errors import (
    DatasetNotFoundError,
    DatasetUnavailableError,
    EmbeddingModelError,
    InvalidQueryError,
    McpowerError,
    ResultNotFoundError,
)
from mcpower.fts import query_terms
from mcpower.manifest import ID_PATTERN, MANIFEST_NAME, Manifest, read_manifest
from mcpower.ranking import (
    CANDIDATE_FACTOR,
    MIN_CANDIDATES,
    best_snippet,
    fuse,
    is_low_confidence,
    validate_mode,
    validate_query,
    validate_top_k,
)
from mcpower.results import (
    MAX_HEADING_CHARS,
    MAX_SNIPPET_CHARS,
    DatasetSummary,
    Lines,
    MetadataResponse,
    Mode,
    SearchFilters,
    SearchMeta,
    SearchResponse,
    SearchResult,
    SourceResponse,
    clip_chars,
    clip_json,
)

if TYPE_CHECKING:  # the store and embedders pull in numpy/FAISS: imported when first used
    from mcpower.embedding import Embedder
    from mcpower.store import ChunkHit, KnowledgeStore

logger = logging.getLogger(__name__)

# Queries are embedded with ONNX fp32 whatever backend embedded the documents: fp32 gives torch's
# vectors, and an int8 dataset queried in fp32 keeps its cosines on the scale hybrid fusion was
# tuned for (SciFact hybrid nDCG@10: fp32 dataset 0.7380; int8 dataset 0.7374 with fp32 queries,
# 0.7288 with int8 queries), for ~2 ms more a query.
QUERY_BACKEND = "onnx"

# Responses stay under 1 MB on the wire. A tool result carries its JSON twice (structuredContent,
# and as text where every quote and backslash is escaped again: at most twice the bytes), so the
# variable part of an answer gets 300 KB as JSON — sized in bytes, since an emoji takes 4 and a
# control character 6.
MAX_SOURCE_CHARS = 150_000
MAX_SOURCE_JSON_BYTES = 300_000
MAX_RESULTS_JSON_BYTES = 300_000
MIN_SNIPPET_CHARS = 64
_RESULTS = TypeAdapter(list[SearchResult])
EmbedderFactory = Callable[[str, str], "Embedder"]
_ID_RE = re.compile(ID_PATTERN)


@dataclass
class DatasetEntry:
    """A manifest found under the root: ready to search, or an error with its reason."""

    id: str
    folder: Path
    manifest: Manifest | None
    error: McpowerError | None = None
    _stamp: tuple[int, int, int] = field(default=(0, 0, 0), repr=False)

    @property
    def status(self) -> Literal["ready", "error"]:
        return "error" if self.error else "ready"

    def summary(self) -> DatasetSummary:
        m = self.manifest
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
            model=m.embedding.model,
            backend=m.embedding.backend,
            updated_at=m.updated_at.isoformat(),
        )


def default_embedder_factory(model: str, backend: str) -> Embedder:
    from mcpower import embedding

    try:
        return embedding.load_embedder(model, backend)
    except EmbeddingModelError:
        if backend == "onnx":  # no ONNX export possible: torch gives the same vectors, only slower
            logger.warning("ONNX backend unavailable for %s; falling back to torch", model)
            return embedding.load_embedder(model, "torch")
        raise


class Registry:
    """The datasets under ``root`` and the loaded stores, shared by the CLI and the MCP server.

    Thread-safe; stores and query embedders are loaded lazily, once.
    """

    def __init__(self, root: Path, embedder_factory: EmbedderFactory | None = None) -> None:
        self.root = root
        self._factory = embedder_factory or default_embedder_factory
        self._entries: dict[str, DatasetEntry] = {}
        # Manifests as last read, by path and file stamp: a scan re-reads only those that changed.
        self._read: dict[Path, tuple[tuple[int, int, int], Manifest]] = {}
        self._stores: dict[str, KnowledgeStore] = {}
        self._embedders: dict[tuple[str, str], Embedder] = {}
        self._lock = threading.RLock()
        self._load_locks: dict[object, threading.Lock] = {}
        self.scan()

    def close(self) -> None:
        """Close the loaded stores' database connections; later calls load them again."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    # ------------------------------------------------------------ discovery

    def scan(self) -> list[DatasetEntry]:
        """Look at every manifest under the root (re-reading changed ones); returns all entries, ready and not."""
        found: dict[str, DatasetEntry] = {}
        misnamed: list[tuple[Path, Manifest]] = []
        with self._lock:
            known_reads, reads = self._read, {}
        for path in _find_manifests(self.root):
            folder = path.parent
            stamp = _stamp_of(path)  # before reading: a manifest replaced meanwhile then looks changed
            try:
                seen = known_reads.get(path)
                manifest = seen[1] if seen is not None and seen[0] == stamp else read_manifest(path)
                reads[path] = (stamp, manifest)
            except McpowerError as e:
                key = _entry_key(folder, self.root)
                found[key] = DatasetEntry(key, folder, None, e)
                with self._lock:
                    before = self._entries.get(key)
                if before is None or before.error is None or before.error.message != e.message:  # log news only
                    logger.warning("dataset.error %s", e.message, extra={"event": "dataset.error", "dataset": key})
                continue
            if folder.name != manifest.id and folder.parent == self.root:
                misnamed.append((folder, manifest))  # after the others: it must not displace the real one
                continue
            entry = DatasetEntry(manifest.id, folder, manifest, None, stamp)
            with self._lock:
                known = self._entries.get(manifest.id)
            if known is not None and known.manifest == manifest and known._stamp == entry._stamp:
                entry.error = known.error  # a load failure stays until the dataset is re-ingested
            if manifest.id in found:
                other = found[manifest.id].folder
                entry.error = DatasetUnavailableError(
                    f"{_rel(folder, self.root)}: dataset id {manifest.id!r} is already used by "
                    f"{_rel(other, self.root)}; give one of them another id"
                )
                found[f"{manifest.id}@{_rel(folder, self.root)}"] = entry
                continue
            found[manifest.id] = entry
        for folder, manifest in misnamed:
            # Under the id it claims (so a search for that id explains), unless a dataset has it.
            rel = _rel(folder, self.root)
            key = next((k for k in (manifest.id, rel) if k not in found), f"{manifest.id}@{rel}")
            found[key] = DatasetEntry(
                key,
                folder,
                None,
                DatasetUnavailableError(
                    f"{folder.name}/manifest.json: id {manifest.id!r} differs from its folder name; "
                    f"rename the folder to {manifest.id!r}"
                ),
            )
        with self._lock:
            self._entries, self._read = found, reads
        return list(found.values())

    def entries(self) -> list[DatasetEntry]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.id)

    def ready_ids(self) -> list[str]:
        return [e.id for e in self.entries() if e.status == "ready"]

    def entry(self, dataset_id: str) -> DatasetEntry:
        """Raises DatasetNotFoundError (listing the ids there are) for an unknown id."""
        with self._lock:
            entry = self._entries.get(dataset_id) if isinstance(dataset_id, str) else None
        if entry is None:
            if isinstance(dataset_id, str) and _ID_RE.match(dataset_id):
                self.scan()  # a dataset ingested since we last looked
                with self._lock:
                    entry = self._entries.get(dataset_id)
            if entry is None:
                raise DatasetNotFoundError(str(dataset_id), [e.id for e in self.entries()])
        return entry

    # ------------------------------------------------------------ loading

    def store(self, dataset_id: str) -> KnowledgeStore:
        """The loaded store of a dataset, reloading it if a newer version was published.

        Raises:
            DatasetNotFoundError, DatasetUnavailableError (and subclasses).
        """
        entry = self._fresh_entry(self.entry(dataset_id))
        if entry.error:
            raise entry.error
        assert entry.manifest is not None
        with self._lock:
            store = self._stores.get(entry.id)
            if store is not None and store.manifest == entry.manifest:
                return store
            lock = self._load_locks.setdefault(entry.id, threading.Lock())
        with lock:  # one loader per dataset; others wait for it, then share the result
            with self._lock:
                store = self._stores.get(entry.id)
                if store is not None and store.manifest == entry.manifest:
                    return store
            from mcpower.store import open_store

            started = time.perf_counter()
            try:
                new = open_store(entry.folder, entry.manifest)
            except DatasetUnavailableError:
                # Two publishes while we loaded can prune the version we were reading: load the current one.
                fresh = self._fresh_entry(entry)
                try:
                    if fresh is entry or fresh.manifest is None:
                        raise
                    entry = fresh
                    new = open_store(fresh.folder, fresh.manifest)
                except DatasetUnavailableError as e:
                    entry.error = e
                    logger.error("dataset.error %s", e.message, extra={"event": "dataset.error", "dataset": entry.id})
                    raise
            assert entry.manifest is not None
            logger.info(
                "dataset.loaded %s",
                entry.id,
                extra={
                    "event": "dataset.loaded",
                    "dataset": entry.id,
                    "chunks": entry.manifest.counts.chunks,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            with self._lock:
                # The old store is not closed: a search running on it in another thread finishes first.
                self._stores[entry.id] = new
            return new

    def _fresh_entry(self, entry: DatasetEntry) -> DatasetEntry:
        """The entry, re-read if its manifest file changed on disk since it was read."""
        path = entry.folder / MANIFEST_NAME
        stamp = _stamp_of(path)  # taken before reading, so a publish racing the read is seen next time
        if entry.manifest is None or stamp == entry._stamp:
            return entry
        try:
            manifest = read_manifest(path)
            fresh = DatasetEntry(manifest.id, entry.folder, manifest, None, stamp)
        except McpowerError as e:
            fresh = DatasetEntry(entry.id, entry.folder, None, e)
        if fresh.id != entry.id:
            return entry
        with self._lock:
            self._entries[entry.id] = fresh
        return fresh

    def embedder_for(self, manifest: Manifest) -> Embedder:
        """The query embedder for a dataset, loaded once per (model, backend).

        Raises:
            EmbeddingModelError: the dataset's model cannot be loaded here, or differs from it.
        """
        key = (manifest.embedding.model, QUERY_BACKEND)
        with self._lock:
            loaded = key in self._embedders
            lock = self._load_locks.setdefault(key, threading.Lock())
        if not loaded:  # the dimension check below applies to a cached embedder too
            with lock:
                if key not in self._embedders:
                    try:
                        emb = self._factory(*key)
                    except EmbeddingModelError as e:
                        raise EmbeddingModelError(
                            f"dataset {manifest.id!r} was built with model {manifest.embedding.model!r}, "
                            f"which cannot be loaded here: {e.message}"
                        ) from e
                    with self._lock:
                        self._embedders[key] = emb
        emb = self._embedders[key]
        if emb.dimension != manifest.embedding.dimension:
            raise EmbeddingModelError(
                f"dataset {manifest.id!r} has {manifest.embedding.dimension}-dimensional vectors but model "
                f"{emb.model_name!r} gives {emb.dimension}; re-ingest it with `mcpower ingest`"
            )
        if emb.model_fingerprint != manifest.embedding.model_fingerprint:
            raise EmbeddingModelError(
                f"dataset {manifest.id!r} was built with other weights of model {manifest.embedding.model!r} "
                "than the ones installed here; re-ingest it with `mcpower ingest --full`"
            )
        return emb

    def _prefetch_embedder(self, dataset: str | None) -> None:
        """Start loading the query model in a thread while the caller loads the store (a cold CLI
        search pays for both otherwise); whoever needs it first waits on the same per-key lock."""
        try:
            entry = self.entry(dataset) if dataset is not None else None
        except McpowerError:
            return
        manifest = (
            entry.manifest if entry is not None else next((e.manifest for e in self.entries() if e.manifest), None)
        )
        if manifest is None or (manifest.embedding.model, QUERY_BACKEND) in self._embedders:
            return

        def load() -> None:
            with contextlib.suppress(McpowerError):  # the search itself reports it
                self.embedder_for(manifest)

        threading.Thread(target=load, name="mcpower-embedder", daemon=True).start()

    def warm_up(self) -> None:
        """Load every ready dataset and its query embedder now (the server does this after the handshake)."""
        for entry in self.entries():
            if entry.status != "ready" or entry.manifest is None:
                continue
            try:
                store = self.store(entry.id)
                self.embedder_for(store.manifest).embed_query("warm up")
            except McpowerError as e:
                logger.error("dataset.error %s", e.message, extra={"event": "dataset.error", "dataset": entry.id})

    # ------------------------------------------------------------ search

    def search(
        self,
        query: str,
        dataset: str | None = None,
        top_k: int | None = None,
        mode: str = "hybrid",
        filters: SearchFilters | None = None,
        min_score: float = 0.0,
        snippet_chars: int = MAX_SNIPPET_CHARS,
    ) -> SearchResponse:
        """Search one dataset, or every ready dataset when ``dataset`` is None, and merge.

        Filters apply inside each candidate list, before the top k is taken.

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
        if m != "keyword":
            self._prefetch_embedder(dataset)
        if dataset is not None:
            stores = [self.store(dataset)]
        else:
            stores, failed = [], []
            self.scan()  # pick up datasets ingested (or broken) since the last look
            for i in self.ready_ids():
                try:  # one corrupt dataset, or one whose model cannot be used, must not break the others
                    store = self.store(i)
                    if m != "keyword":
                        self.embedder_for(store.manifest)
                    stores.append(store)
                except (DatasetUnavailableError, EmbeddingModelError) as e:
                    failed.append(e)
            if failed and not stores:
                raise failed[0]
        k = top_k or (
            stores[0].manifest.default_top_k
            if len(stores) == 1
            else max((s.manifest.default_top_k for s in stores), default=5)
        )
        merged: list[tuple[float, str, int, ChunkHit]] = []
        terms = query_terms(q)
        for store in stores:
            for chunk, score in self._search_store(store, q, k, m, filters):
                merged.append((score, store.id, chunk.id, chunk))
        merged.sort(key=lambda t: (-t[0], t[1], t[2]))
        picked = [(store_id, hit, score) for score, store_id, _, hit in merged if score >= min_score][:k]
        results = [_result(store_id, hit, score, terms, snippet_chars) for store_id, hit, score in picked]
        # Long or multi-byte chunks: shorter snippets, then fewer results, until the answer fits.
        while len(_RESULTS.dump_json(results)) > MAX_RESULTS_JSON_BYTES and snippet_chars > MIN_SNIPPET_CHARS:
            snippet_chars //= 2
            results = [_result(store_id, hit, score, terms, snippet_chars) for store_id, hit, score in picked]
        while len(results) > 1 and len(_RESULTS.dump_json(results)) > MAX_RESULTS_JSON_BYTES:
            results.pop()
        best = merged[0][0] if merged else None
        return SearchResponse(
            status="ok" if results else "empty",
            results=results,
            meta=SearchMeta(
                datasets=[s.id for s in stores],
                mode=m,
                limit=k,
                count=len(results),
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                low_confidence=is_low_confidence(m, best),
                min_score=min_score,
            ),
        )

    def rank_paths(self, query: str, dataset: str, depth: int, mode: str = "hybrid") -> list[str]:
        """Document paths of the best ``depth`` chunks, best first; for evaluation (no 100 cap, no snippets)."""
        store = self.store(dataset)
        return [
            hit.path for hit, _ in self._search_store(store, validate_query(query), depth, validate_mode(mode), None)
        ]

    def _search_store(
        self, store: KnowledgeStore, q: str, k: int, mode: Mode, filters: SearchFilters | None
    ) -> list[tuple[ChunkHit, float]]:
        depth = max(k * CANDIDATE_FACTOR, MIN_CANDIDATES)
        cosines: dict[int, float] = {}
        # One keyword pass scores every match: the top `depth` are the keyword candidates, and the
        # rest answer the BM25 of the semantic candidates.
        # Filters apply inside both candidate lists: the ids they allow are looked up once for both.
        allowed = store.filtered_ids(filters) if filters is not None and filters.active else None
        matches = store.keyword(q, allowed) if mode != "semantic" else None
        bm25s = dict(matches.top(depth)) if matches is not None else {}
        if mode != "keyword":
            qvec = self.embedder_for(store.manifest).embed_query(q)
            cosines = dict(store.semantic(qvec, depth, allowed))
            if matches is not None:
                # Score every candidate on both sides, so fusion never guesses a missing score.
                missing = [i for i in bm25s if i not in cosines]
                if missing:
                    vecs = store.vectors(missing)
                    cosines.update(zip(missing, (vecs @ qvec).tolist()))
                bm25s.update(matches.scores_of(cosines))
        ranked = fuse(mode, cosines, bm25s)[:k]
        hits = store.chunks([i for i, _ in ranked])
        return [(hits[i], s) for i, s in ranked if i in hits]  # ids FAISS invented are dropped

    # ------------------------------------------------------------ lookups by result id

    def resolve(self, result_id: str) -> tuple[KnowledgeStore, ChunkHit]:
        """The store and chunk a result id names.

        Raises:
            ResultNotFoundError: malformed id, unknown dataset, or no such chunk (e.g. re-ingested away).
        """
        dataset, _, hex_id = result_id.rpartition(":") if isinstance(result_id, str) else ("", "", "")
        try:
            cid = int(hex_id, 16) if len(hex_id) == 16 else -1
        except ValueError:
            cid = -1
        if cid < 0 or not _ID_RE.match(dataset) or len(dataset) > 64:
            raise ResultNotFoundError(
                f"{result_id[:80]!r} is not a result id; use one from a search result (like 'docs:0123456789abcdef')"
            )
        try:
            store = self.store(dataset)
        except DatasetNotFoundError as e:
            raise ResultNotFoundError(f"no result {result_id!r}: {e.message}") from e
        hit = store.chunks([cid]).get(cid)
        if hit is None:
            raise ResultNotFoundError(
                f"no result {result_id!r} in dataset {dataset!r}; it may have changed since it was re-ingested "
                "— search again for fresh ids"
            )
        return store, hit

    def get_source(self, result_id: str, scope: str = "neighbors") -> SourceResponse:
        """The text behind a result: the chunk, the chunk with its neighbours, or its heading section.

        Text comes from the stored document by line range, so overlapping chunks are not repeated.

        Raises:
            ResultNotFoundError, InvalidQueryError (bad scope).
        """
        if scope not in ("chunk", "neighbors", "section"):
            raise InvalidQueryError(f"scope must be chunk, neighbors or section, got {str(scope)[:20]!r}")
        store, hit = self.resolve(result_id)
        if scope == "chunk":
            around = [hit]
        elif scope == "neighbors":
            around = store.neighbours(hit, 1, 1)
        else:
            around = [c for c in store.neighbours(hit, 10**6, 10**6) if c.heading_path == hit.heading_path]
        start, end = min(c.start_line for c in around), max(c.end_line for c in around)
        doc = store.document_by_id(hit.document_id)
        lines = doc.content.replace("\r\n", "\n").replace("\r", "\n").split("\n") if doc else []
        content = "\n".join(lines[start - 1 : end]) if scope != "chunk" else hit.text
        clipped = clip_json(content[:MAX_SOURCE_CHARS], MAX_SOURCE_JSON_BYTES)
        return SourceResponse(
            result_id=result_id,
            dataset=store.id,
            content=clipped,
            scope=scope,  # type: ignore[arg-type]
            source_path=hit.path,
            title=hit.title,
            heading_path=clip_chars(hit.heading_path, MAX_HEADING_CHARS),
            chunk_index=hit.ordinal,
            lines=Lines(start=start, end=end),
            truncated=len(clipped) < len(content),
            retrieved_at=utc_now_iso(),
        )

    def get_metadata(self, result_id: str) -> MetadataResponse:
        """Facts about the document behind a result.

        Raises:
            ResultNotFoundError.
        """
        store, hit = self.resolve(result_id)
        doc = store.document_by_id(hit.document_id)
        if doc is None:  # pragma: no cover - the schema's foreign key guarantees it
            raise ResultNotFoundError(f"no document for result {result_id!r}")
        return MetadataResponse(
            result_id=result_id,
            dataset=store.id,
            file_name=Path(doc.path).name,
            file_type=doc.file_type,
            source_path=doc.path,
            title=doc.title,
            size=doc.size,
            content_hash=doc.content_hash,
            indexed_at=doc.indexed_at,
            chunk_index=hit.ordinal,
            chunk_count=store.chunk_count(hit.document_id),
        )


def make_result_id(dataset: str, chunk_id: int) -> str:
    return f"{dataset}:{chunk_id:016x}"


def _result(dataset: str, hit: ChunkHit, score: float, terms: list[str], snippet_chars: int) -> SearchResult:
    return SearchResult(
        result_id=make_result_id(dataset, hit.id),
        score=round(min(max(score, 0.0), 1.0), 4),
        title=hit.title,
        path=hit.path,
        snippet=best_snippet(hit.text, terms, snippet_chars),
        file_type=hit.file_type,
        heading_path=clip_chars(hit.heading_path, MAX_HEADING_CHARS),
        lines=Lines(start=hit.start_line, end=hit.end_line),
        dataset=dataset,
    )


def _find_manifests(root: Path) -> list[Path]:
    """manifest.json files under root, skipping hidden folders (staging builds, locks)."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if MANIFEST_NAME in filenames:
            out.append(Path(dirpath) / MANIFEST_NAME)
            dirnames[:] = []  # a dataset folder holds versions, not other datasets
    return out


def _stamp_of(path: Path) -> tuple[int, int, int]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return (0, 0, 0)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _entry_key(folder: Path, root: Path) -> str:
    return _rel(folder, root) or folder.name


def _rel(folder: Path, root: Path) -> str:
    try:
        return folder.relative_to(root).as_posix()
    except ValueError:
        return folder.name


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
